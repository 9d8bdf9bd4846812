package bus

import (
	"context"
	"testing"
	"time"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// The notice about a forbidden frame goes to its sender only: followers and in-process handlers
// never see it, and Follower.Next still returns at least one frame.
func TestNotAllowedNoticeIsForTheSenderOnly(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{Tokens: map[string]Permissions{
		"gui": {Name: "gui", Emit: []string{"gui.*"}},
	}}})
	fl := s.Follow(FollowOptions{Name: "test"})
	defer fl.Close()
	seen := make(chan string, 16)
	s.On("*", func(m message.Message) { seen <- m.Type })
	gui := dial(t, url+"?token=gui", nil)
	other := dial(t, url, nil)

	send(t, gui, ws.OpText, []byte(`{"type":"speak","data":{"utterance":"\"hi\""}}`))
	expect(t, ws.OpText, []byte(`{"type":"ovos.bus.error","data":{"error":"not allowed","msg_type":"speak"},"context":{}}`), gui)
	m := []byte(`{"type":"gui.value.set"}`)
	send(t, gui, ws.OpText, m)
	expect(t, ws.OpText, m, gui, other)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frames, err := fl.Next(ctx, make([]Frame, 0, 8))
	if err != nil || len(frames) == 0 {
		t.Fatalf("Next: %d frames, %v", len(frames), err)
	}
	for _, f := range frames {
		if f.Type() != "gui.value.set" && f.Type() != "connected" {
			t.Errorf("the follower saw %q", f.Type())
		}
	}
	select {
	case typ := <-seen:
		if typ != "gui.value.set" {
			t.Errorf("the in-process handler saw %q first", typ)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the in-process handler saw nothing")
	}
}
