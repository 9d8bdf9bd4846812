package bus_test

import (
	"context"
	"fmt"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// Embedding the bus: handlers subscribe to message types and follow the bus
// like a client; Emit sends into it.
func ExampleServer_On() {
	s, err := bus.New(bus.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	if err := s.Start(); err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	done := make(chan struct{})
	s.On("speak", func(m message.Message) {
		fmt.Println(m.Type, m.Data["utterance"])
		fmt.Println(m)
		close(done)
	})
	s.Emit(message.New("speak", map[string]any{"utterance": "hello"}))
	<-done
	// Output:
	// speak hello
	// {"type":"speak","data":{"utterance":"hello"},"context":{}}
}

// A Follower reads the bus's log as a client receives it, in batches: the
// way a cluster link or a monitor watches the bus. (The bus need not
// listen for that.)
func ExampleServer_Follow() {
	s, err := bus.New(bus.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	f := s.Follow(bus.FollowOptions{Name: "example"})
	defer f.Close()
	s.Emit(message.New("speak", map[string]any{"utterance": "hello"}))
	s.Publish(ws.OpText, []byte(`{"type":"remote.note"}`), "node-b")

	var batch []bus.Frame
	for len(batch) < 2 {
		batch, err = f.Next(context.Background(), batch)
		if err != nil {
			panic(err)
		}
	}
	for _, fr := range batch {
		fmt.Printf("%d %s origin=%q\n", fr.Seq, fr.Type(), fr.Origin)
	}
	// Output:
	// 0 speak origin=""
	// 1 remote.note origin="node-b"
}
