# make test: installs the test dependencies (Debian and Node packages), then
# vets, checks that the other platforms compile, and runs every test with the
# race detector (in random order), the fuzz seed corpora included, in the main
# module and in the nested ws, peers and interop modules.
# make release: versioned, stripped binaries for Linux amd64, arm64 and armv7
# in dist/, with SHA256SUMS.
# make stress: make test STRESS_RUNS times in a row beside two busy loops.
# make cluster-faults: the cluster's fault suite (e2e TestClusterFaults,
# TestClusterStartFirst, TestClusterPartialLink) FAULT_RUNS times in a row
# beside two busy loops.
GO ?= go

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
DATE    ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(DATE)
# GOOS/GOARCH[/GOARM] of the release binaries (armv7: the Raspberry Pi 2 and later on a 32-bit OS).
RELEASE_TARGETS = linux/amd64 linux/arm64 linux/arm/7
# Platforms that must compile (not released): make cross.
CROSS_TARGETS = windows/amd64 darwin/arm64 darwin/amd64 freebsd/amd64
STRESS_RUNS ?= 10
FAULT_RUNS ?= 20

.PHONY: test deps vet cross test-only bench micro build release stress cluster-faults

test: deps vet cross test-only

deps:
	./scripts/install-test-deps.sh

vet:
	$(GO) vet ./...
	cd ws && $(GO) vet ./...
	cd bench/peers && $(GO) vet ./...
	cd interop && $(GO) vet ./...

# The main module compiles on every platform of CROSS_TARGETS and RELEASE_TARGETS.
cross:
	@for t in $(CROSS_TARGETS) $(RELEASE_TARGETS); do \
		os=$${t%%/*}; rest=$${t#*/}; arch=$${rest%%/*}; arm=; \
		case $$rest in */*) arm=$${rest#*/};; esac; \
		echo "go build ./... GOOS=$$os GOARCH=$$arch$${arm:+ GOARM=$$arm}"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build ./... || exit 1; \
	done

test-only:
	$(GO) test -race -shuffle=on -timeout 20m ./...
	OVBUS_TEST_PORTABLE=1 $(GO) test -race -shuffle=on -count=1 -timeout 10m ./bus/
	$(GO) test -count=1 -run 'Alloc' ./bench/... ./bus/
	cd ws && $(GO) test -race -shuffle=on -count=1 ./...
	cd ws && $(GO) test -count=1 -run Alloc ./...
	# The portable Go versions of the amd64 assembly (masking, the ASCII scan).
	cd ws && $(GO) test -tags purego -count=1 ./...
	# 32 bits, as a Raspberry Pi on a 32-bit OS (linux/arm/7, whose structures are laid out as 386's) runs
	# it: 64-bit atomics' alignment, int overflow, allocations. 386 binaries run on an amd64 Linux kernel.
	# Not e2e: the same code as above, through processes.
	GOARCH=386 $(GO) test -count=1 -timeout 10m $$($(GO) list ./... | grep -v /e2e)
	cd ws && GOARCH=386 $(GO) test -count=1 ./...
	cd bench/peers && $(GO) test -race -shuffle=on -count=1 -timeout 10m ./...
	cd interop && $(GO) test -race -shuffle=on -count=1 -timeout 10m ./...

build:
	$(GO) build -ldflags '-X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.buildDate=$(DATE)' -o ovbus ./cmd/ovbus

release:
	rm -rf dist && mkdir -p dist
	@for t in $(RELEASE_TARGETS); do \
		os=$${t%%/*}; rest=$${t#*/}; arch=$${rest%%/*}; arm=; name=$$arch; \
		case $$rest in */*) arm=$${rest#*/}; name=$${arch}v$$arm;; esac; \
		out=dist/ovbus-$(VERSION)-$$os-$$name; \
		echo "$$out"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$out ./cmd/ovbus || exit 1; \
	done
	cd dist && sha256sum ovbus-* > SHA256SUMS && cat SHA256SUMS

# make test STRESS_RUNS times in a row with two busy loops beside it; stops at the first failure.
stress:
	./scripts/stress.sh $(STRESS_RUNS)

# The cluster's fault suite FAULT_RUNS times in a row with two busy loops beside it; stops at the first failure.
cluster-faults:
	./scripts/cluster-faults.sh $(FAULT_RUNS)

bench:
	cd ws && $(GO) test -run '^$$' -bench . -benchmem .
	$(GO) test -run '^$$' -bench . -benchmem ./bus/

# The micro-benchmark and protocol-core tables of BENCHMARKS.md, into bench/results.
micro:
	bench/micro.sh
