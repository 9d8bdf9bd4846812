package peers

import (
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// The gorilla peers follow gorilla/websocket's examples: examples/echo for
// echo and examples/chat for fan-out (a hub goroutine owns the client set; one
// read pump and one write pump per client; a buffered send channel per client;
// a client whose channel is full is dropped). Each broadcast is encoded once
// as a PreparedMessage, which gorilla's documentation recommends for sending
// one payload to many connections. Unlike the chat example, queued messages
// are not joined with newlines into one message: the bus relays frames
// unchanged.

// gorillaWriteWait is the chat example's writeWait.
const gorillaWriteWait = 10 * time.Second

func gorillaUpgrader() *websocket.Upgrader {
	return &websocket.Upgrader{
		// The OVOS bus accepts every Origin.
		CheckOrigin: func(*http.Request) bool { return true },
	}
}

func newGorilla(mode Mode, o Options) http.Handler {
	up := gorillaUpgrader()
	if mode == ModeEcho {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return // Upgrade has replied with an HTTP error
			}
			defer c.Close()
			c.SetReadLimit(o.MaxMessageSize)
			for {
				mt, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				if err := c.WriteMessage(mt, msg); err != nil {
					return
				}
			}
		})
	}

	greeting, err := websocket.NewPreparedMessage(websocket.TextMessage, []byte(Greeting))
	if err != nil {
		panic(err)
	}
	h := &gorillaHub{
		greeting:   greeting,
		broadcast:  make(chan *websocket.PreparedMessage),
		register:   make(chan *gorillaClient),
		unregister: make(chan *gorillaClient),
		clients:    make(map[*gorillaClient]bool),
	}
	go h.run()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(o.MaxMessageSize)
		cl := &gorillaClient{hub: h, conn: c, send: make(chan *websocket.PreparedMessage, o.Queue), logf: o.Logf}
		h.register <- cl
		go cl.writePump()
		go cl.readPump()
	})
}

// gorillaHub is the chat example's Hub: a single goroutine, so every client
// is handed the broadcasts in the one order the hub received them.
type gorillaHub struct {
	greeting   *websocket.PreparedMessage
	clients    map[*gorillaClient]bool
	broadcast  chan *websocket.PreparedMessage
	register   chan *gorillaClient
	unregister chan *gorillaClient
}

func (h *gorillaHub) run() {
	for {
		select {
		case c := <-h.register:
			// The greeting is the first frame in the new client's queue,
			// ahead of every broadcast it will be part of: a client that
			// has seen the greeting is a member.
			c.send <- h.greeting
			h.clients[c] = true
		case c := <-h.unregister:
			if _, ok := h.clients[c]; ok {
				delete(h.clients, c)
				close(c.send)
			}
		case m := <-h.broadcast:
			for c := range h.clients {
				select {
				case c.send <- m:
				default: // too slow: drop it, as the chat example does
					close(c.send)
					delete(h.clients, c)
					c.logf("gorilla: dropping %v: send queue full", c.conn.RemoteAddr())
				}
			}
		}
	}
}

type gorillaClient struct {
	hub  *gorillaHub
	conn *websocket.Conn
	send chan *websocket.PreparedMessage
	logf func(string, ...any)
}

func (c *gorillaClient) readPump() {
	defer func() {
		c.hub.unregister <- c
		c.conn.Close()
	}()
	for {
		mt, msg, err := c.conn.ReadMessage()
		if err != nil {
			if websocket.IsUnexpectedCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseAbnormalClosure) {
				c.logf("gorilla: read: %v", err)
			}
			return
		}
		// Encode once here, on the sender's goroutine; the hub only orders.
		pm, err := websocket.NewPreparedMessage(mt, msg)
		if err != nil {
			c.logf("gorilla: prepare: %v", err)
			return
		}
		c.hub.broadcast <- pm
	}
}

func (c *gorillaClient) writePump() {
	defer c.conn.Close()
	for m := range c.send {
		c.conn.SetWriteDeadline(time.Now().Add(gorillaWriteWait))
		if err := c.conn.WritePreparedMessage(m); err != nil {
			return
		}
	}
	// The hub closed the channel.
	c.conn.SetWriteDeadline(time.Now().Add(gorillaWriteWait))
	c.conn.WriteMessage(websocket.CloseMessage, []byte{})
}
