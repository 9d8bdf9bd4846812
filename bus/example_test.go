package bus_test

import (
	"context"
	"fmt"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/message"
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
