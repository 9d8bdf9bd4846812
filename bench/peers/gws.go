package peers

import (
	"net/http"
	"sync"

	"github.com/lxzan/gws"
)

// The gws peers follow lxzan/gws's README: an event handler embedding
// gws.BuiltinEventHandler, an Upgrader mounted on net/http with ReadLoop run
// in its own goroutine ("Best Practice"), socket.WriteMessage for echo (the
// echo example), and a gws.Broadcaster per fan-out message ("Broadcast"),
// which encodes the frame once and queues it on every connection's own
// writer. One mutex around the broadcast loop gives the single total order:
// each connection's write queue is FIFO, so every client gets the frames in
// the order the broadcasts took the lock. gws's write queues are unbounded.

func newGWS(mode Mode, o Options) http.Handler {
	opt := &gws.ServerOption{
		ReadMaxPayloadSize:  int(o.MaxMessageSize),
		WriteMaxPayloadSize: int(o.MaxMessageSize),
	}
	var handler gws.Event
	if mode == ModeEcho {
		handler = &gwsEcho{}
	} else {
		handler = &gwsFanout{conns: make(map[*gws.Conn]struct{}), logf: o.Logf}
	}
	up := gws.NewUpgrader(handler, opt)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		socket, err := up.Upgrade(w, r)
		if err != nil {
			return
		}
		go socket.ReadLoop()
	})
}

type gwsEcho struct{ gws.BuiltinEventHandler }

func (gwsEcho) OnPing(socket *gws.Conn, payload []byte) { _ = socket.WritePong(payload) }

func (gwsEcho) OnMessage(socket *gws.Conn, message *gws.Message) {
	defer message.Close()
	_ = socket.WriteMessage(message.Opcode, message.Bytes())
}

var gwsGreeting = []byte(Greeting)

type gwsFanout struct {
	gws.BuiltinEventHandler
	mu    sync.Mutex
	conns map[*gws.Conn]struct{}
	logf  func(string, ...any)
}

func (h *gwsFanout) OnOpen(socket *gws.Conn) {
	// Queued on the connection's writer ahead of any broadcast, in the same
	// critical section that makes it a member: a client that has seen the
	// greeting is a member.
	h.mu.Lock()
	socket.WriteAsync(gws.OpcodeText, gwsGreeting, nil)
	h.conns[socket] = struct{}{}
	h.mu.Unlock()
}

func (h *gwsFanout) OnClose(socket *gws.Conn, err error) {
	h.mu.Lock()
	delete(h.conns, socket)
	h.mu.Unlock()
}

func (h *gwsFanout) OnPing(socket *gws.Conn, payload []byte) { _ = socket.WritePong(payload) }

func (h *gwsFanout) OnMessage(socket *gws.Conn, message *gws.Message) {
	// The Broadcaster copies the payload into its frame on the first
	// Broadcast call (compression is off), so the message can go back to
	// gws's pool once the loop is done.
	defer message.Close()
	b := gws.NewBroadcaster(message.Opcode, message.Bytes())
	h.mu.Lock()
	for c := range h.conns {
		if err := b.Broadcast(c); err != nil {
			h.logf("gws: broadcast: %v", err)
		}
	}
	h.mu.Unlock()
	b.Close()
}
