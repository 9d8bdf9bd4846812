package client_test

import (
	"testing"
	"time"

	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/message"
)

// A client given several nodes of a clustered bus dials them in turn: the
// first that answers, and another one after a drop.
func TestSeveralURLs(t *testing.T) {
	dead := "ws://" + closedAddr(t) + "/core"
	a := startBus(t, "127.0.0.1:0")
	b := startBus(t, "127.0.0.1:0")
	c := newClient(t, dead+", "+a.url()+","+b.url(), &client.Options{ReconnectMin: 10 * time.Millisecond, ReconnectJitter: -1})
	if c.URL() != dead {
		t.Errorf("URL before dialling = %s, want the first", c.URL())
	}
	if err := c.Connect(ctxT(t)); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if c.URL() != a.url() {
		t.Fatalf("connected to %s, want %s (the first that answers)", c.URL(), a.url())
	}
	a.waitClients(1)
	a.stop()
	b.waitClients(1)
	if c.URL() != b.url() {
		t.Errorf("reconnected to %s, want %s", c.URL(), b.url())
	}
	got := newCollector()
	c.On("hello", got.handle)
	if err := c.Emit(ctxT(t), message.New("hello", nil)); err != nil {
		t.Fatal(err)
	}
	got.waitFor(t, "hello")

	if _, err := client.New(a.url()+",http://x/core", nil); err == nil {
		t.Error("a bad URL in the list was accepted")
	}
}
