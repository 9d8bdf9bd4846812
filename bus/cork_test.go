package bus

import (
	"testing"
	"time"
)

// sleepingOwner joins a follower to h whose owner records its wakes, and
// puts it to sleep at the head of the log.
func sleepingOwner(t *testing.T, h *hub) (*follower, chan wakeHow) {
	t.Helper()
	woken := make(chan wakeHow, 16)
	f := newFollower(h)
	f.owner = wakeFunc(func(how wakeHow) bool { woken <- how; return false })
	h.join(f)
	if !h.sleep(f, f.cursor.Load()) {
		t.Fatal("sleep with nothing published")
	}
	return f, woken
}

// TestCorkHoldsWakesUntilTheLastGoes: while corks are held, publishes wake
// nobody; the last uncork wakes the sleeper once, on its own goroutine,
// and the sleeper takes every frame published meanwhile in one batch.
func TestCorkHoldsWakesUntilTheLastGoes(t *testing.T) {
	h := newHub(1024, 1<<20)
	h.corkFor = time.Hour // only the corks decide here
	f, woken := sleepingOwner(t, h)
	h.cork()
	h.cork()
	for k := range 3 {
		h.publish(testEntry(0, k))
	}
	h.uncork()
	if len(woken) != 0 {
		t.Fatal("woken while a cork is held")
	}
	h.uncork() // runs the waker here: the wake is done when it returns
	if len(woken) != 1 {
		t.Fatalf("%d wakes after the last uncork, want 1", len(woken))
	}
	var b batch
	if ok, err := f.take(&b, true, 10, 1<<20); !ok || err != nil || len(b.entries) != 3 {
		t.Fatalf("take: %v %v, %d entries, want the 3 in one batch", ok, err, len(b.entries))
	}
	if h.corks.Load() != 0 || h.wakeDue {
		t.Fatalf("corks %d, wake due %v after every cork went", h.corks.Load(), h.wakeDue)
	}
}

// TestCorkBoundWakesAHeldPublish: a cork held longer than corkFor (a reader
// that waits) does not hold a publish back: the timer wakes the sleeper,
// and letting the cork go later wakes nobody twice.
func TestCorkBoundWakesAHeldPublish(t *testing.T) {
	h := newHub(1024, 1<<20)
	h.corkFor = time.Millisecond
	_, woken := sleepingOwner(t, h)
	h.cork()
	h.publish(testEntry(0, 0))
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("a held publish was not woken by the bound")
	}
	h.uncork()
	if len(woken) != 0 {
		t.Fatal("woken again by the uncork")
	}
}

// TestLetGoWakesUnderACork: letGo (a flooding reader, a paced sender) does
// the due wake at once, corks held.
func TestLetGoWakesUnderACork(t *testing.T) {
	h := newHub(1024, 1<<20)
	h.corkFor = time.Hour
	_, woken := sleepingOwner(t, h)
	h.cork()
	defer h.uncork()
	h.publish(testEntry(0, 0))
	h.letGo()
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("letGo did not wake the sleeper")
	}
}
