package client_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ovbus/ovbus/client"
)

// stateLog records the state changes reported to OnState; the report of Connected blocks until
// release is closed, as a slow OnState (a terminal write under load) would.
type stateLog struct {
	mu      sync.Mutex
	changes []client.StateChange
	entered chan struct{} // closed when OnState is inside the Connected report
	release chan struct{}
	once    sync.Once
}

func newStateLog() *stateLog {
	return &stateLog{entered: make(chan struct{}), release: make(chan struct{})}
}

func (l *stateLog) onState(sc client.StateChange) {
	if sc.State == client.Connected {
		l.once.Do(func() { close(l.entered) })
		<-l.release
	}
	l.mu.Lock()
	l.changes = append(l.changes, sc)
	l.mu.Unlock()
}

func (l *stateLog) last() client.StateChange {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.changes) == 0 {
		return client.StateChange{State: client.Idle}
	}
	return l.changes[len(l.changes)-1]
}

func waitDone(t *testing.T, c *client.Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed")
	}
}

// Close while OnState is busy: Close returns, but Done waits until OnState has reported Closed.
func TestDoneWaitsForBusyOnState(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	log := newStateLog()
	c := newClient(t, b.url(), &client.Options{OnState: log.onState})
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	<-log.entered
	c.Close()
	select {
	case <-c.Done():
		t.Fatal("Done closed while OnState was still running")
	default:
	}
	close(log.release)
	waitDone(t, c)
	if got := log.last(); got.State != client.Closed {
		t.Errorf("last state reported before Done = %v", got.State)
	}
}

// The cause of the flake of `ovbus listen --reconnect=false`: the connection drops while OnState
// is busy; the error of the drop must be reported before Done.
func TestNoReconnectReportsTheDropBeforeDone(t *testing.T) {
	b := startBus(t, "127.0.0.1:0")
	log := newStateLog()
	c := newClient(t, b.url(), &client.Options{NoReconnect: true, OnState: log.onState})
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	<-log.entered
	b.stop()
	deadline := time.Now().Add(5 * time.Second)
	for c.State() != client.Closed { // set when the drop is seen, before Close runs
		if time.Now().After(deadline) {
			t.Fatal("the client did not see the drop")
		}
		time.Sleep(time.Millisecond)
	}
	close(log.release)
	waitDone(t, c)
	if got := log.last(); got.State != client.Closed || got.Err == nil {
		t.Errorf("last state reported before Done = %v (err %v), want closed with the drop's error", got.State, got.Err)
	}
}
