# make test: installs the test dependencies (Debian and Node packages), then
# vets and runs every test with the race detector, the fuzz seed corpora
# included, in the main module and in the nested ws, peers and interop
# modules.
GO ?= go

.PHONY: test deps vet test-only bench build

test: deps vet test-only

deps:
	./scripts/install-test-deps.sh

vet:
	$(GO) vet ./...
	cd ws && $(GO) vet ./...
	cd bench/peers && $(GO) vet ./...
	cd interop && $(GO) vet ./...

test-only:
	$(GO) test -race -shuffle=on -timeout 20m ./...
	$(GO) test -count=1 -run 'Alloc' ./bench/... ./bus/
	cd ws && $(GO) test -race -shuffle=on -count=1 ./...
	cd ws && $(GO) test -count=1 -run Alloc ./...
	cd bench/peers && $(GO) test -race -timeout 10m ./...
	cd interop && $(GO) test -race -timeout 10m ./...

build:
	$(GO) build -o ovbus ./cmd/ovbus

bench:
	cd ws && $(GO) test -run '^$$' -bench . -benchmem .
	$(GO) test -run '^$$' -bench . -benchmem ./bus/
