package bus

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ovbus/ovbus/ws"
)

func TestRoutingContext(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"speak","context":{"destination":"kitchen","session":{"session_id":"s1"}}}`: "[kitchen] s1",
		`{"context":{"destination":["kitchen","",1,"bedroom"]}}`:                             "[kitchen bedroom] ",
		`{"context":{"session":{"session_id":"default"}}}`:                                   "[] ",
		`{"context":{"session":{"session_id":7}}}`:                                           "[] ",
		`{"context":{"session":null,"destination":null}}`:                                    "[] ",
		`{"context":"x"}`:                      "[] ",
		`{"type":"a"}`:                         "[] ",
		`[1,2]`:                                "[] ",
		`not json`:                             "[] ",
		`{"con\u0074ext":{"destination":"k"}}`: "[k] ", // an escaped key: the exact decoder reads it
		`{"context":{"destination":"a"},"context":{"destination":"b"}}`: "[b] ", // the last wins, as in Python
	} {
		dest, sid := routingContext([]byte(in))
		if got := fmt.Sprintf("%v %s", dest, sid); got != want {
			t.Errorf("routingContext(%s) = %q, want %q", in, got, want)
		}
	}
}

// TestReplyRouting: two satellites with reply routing and a hub service on
// loopback. A satellite's session and its name make frames private to it;
// the hub sees everything; frames for everyone still reach everyone.
func TestReplyRouting(t *testing.T) {
	s, url := testServer(t, Options{Auth: Auth{
		Sets: map[string]Permissions{"satellite": {ReplyRouting: true}},
		Tokens: map[string]Permissions{
			"kitchen-token-0123456789": {Name: "kitchen", Set: "satellite"},
			"bedroom-token-0123456789": {Name: "bedroom", Set: "satellite"},
		},
	}})
	fl := s.Follow(FollowOptions{Name: "test"})
	defer fl.Close()
	hub := dial(t, url, nil)
	kitchen := dial(t, url+"/kitchen-token-0123456789", nil)
	bedroom := dial(t, url+"/bedroom-token-0123456789", nil)
	all := map[string]*ws.Conn{"hub": hub, "kitchen": kitchen, "bedroom": bedroom}

	// step sends m from a client, which gets it back first (a sender
	// always does), then a marker from the hub that everyone gets: each
	// other client must receive m before the marker exactly when it is in
	// want.
	marker := 0
	step := func(from string, m string, want ...string) {
		t.Helper()
		send(t, all[from], ws.OpText, []byte(m))
		expect(t, ws.OpText, []byte(m), all[from])
		marker++
		mark := fmt.Sprintf(`{"type":"mark","data":{"n":%d}}`, marker)
		send(t, hub, ws.OpText, []byte(mark))
		for name, c := range all {
			_, b := read(t, c)
			got := name == from || string(b) == m
			if string(b) == m {
				_, b = read(t, c)
			}
			if string(b) != mark {
				t.Fatalf("%s: got %q, want the mark %d", name, b, marker)
			}
			if got != slices.Contains(want, name) {
				t.Errorf("after %s sent %s: %s received it: %v", from, m, name, got)
			}
		}
	}
	// The kitchen's utterance: its session becomes the kitchen's.
	step("kitchen", `{"type":"recognizer_loop:utterance","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "hub")
	// The hub's answer in that session reaches the kitchen only.
	step("hub", `{"type":"speak","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "hub")
	// By name.
	step("hub", `{"type":"speak","context":{"destination":"bedroom"}}`, "bedroom", "hub")
	step("hub", `{"type":"speak","context":{"destination":["kitchen","bedroom"]}}`, "kitchen", "bedroom", "hub")
	// For everyone: the default session, a destination that names no
	// routed client, no context.
	step("hub", `{"type":"mycroft.stop","context":{"session":{"session_id":"default"}}}`, "kitchen", "bedroom", "hub")
	step("hub", `{"type":"speak","context":{"destination":["skills"]}}`, "kitchen", "bedroom", "hub")
	step("bedroom", `{"type":"ovos.session.sync"}`, "kitchen", "bedroom", "hub")
	// The bedroom cannot take the kitchen's session: its frame in it goes
	// to itself (its sender) and the owner.
	step("bedroom", `{"type":"speak","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "bedroom", "hub")
	step("hub", `{"type":"speak","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "hub")

	// The kitchen goes: its session's answers go to no satellite until it
	// is back and claims it again.
	kitchen.CloseNow()
	waitFor(t, "the kitchen to leave", 5*time.Second, func() bool { return s.Clients() == 2 })
	delete(all, "kitchen")
	step("hub", `{"type":"speak","context":{"session":{"session_id":"sess-k"}}}`, "hub")
	step("hub", `{"type":"speak","context":{"destination":"kitchen"}}`, "hub")
	step("bedroom", `{"type":"x","context":{"session":{"session_id":"sess-k"}}}`, "bedroom", "hub") // not the bedroom's to take
	all["kitchen"] = dial(t, url+"/kitchen-token-0123456789", nil)
	step("kitchen", `{"type":"recognizer_loop:utterance","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "hub")
	step("hub", `{"type":"speak","context":{"session":{"session_id":"sess-k"}}}`, "kitchen", "hub")

	// A follower of the log (the monitor, a cluster) sees the private
	// frames too, as the hub's services do.
	private := `{"type":"speak","context":{"destination":"bedroom","n":"in-process"}}`
	if err := s.EmitRaw(ws.OpText, []byte(private)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		frames, err := fl.Next(ctx, nil)
		if err != nil {
			t.Fatalf("the follower did not see the private frame: %v", err)
		}
		if slices.ContainsFunc(frames, func(f Frame) bool { return string(f.Payload) == private }) {
			break
		}
	}
	expect(t, ws.OpText, []byte(private), hub, bedroom)
}
