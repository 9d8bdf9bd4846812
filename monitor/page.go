package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/ws"
)

const (
	helloTimeout  = 10 * time.Second // for the page's first message
	writeTimeout  = 10 * time.Second // for one write to the page
	clientsEvery  = time.Second      // how often the client list goes out
	maxPageSends  = 4                // sends waiting for a response at once, per page
	maxPageFrames = 256              // frames taken from the log at once
)

// page is one open monitor page: its socket, its follower of the log and
// what its token allows.
type page struct {
	m      *Monitor
	conn   *ws.Conn
	remote string
	perm   *bus.Permissions // nil: everything
	full   bool             // may see the clients
	smp    *sampler
	sends  chan struct{}  // a semaphore of maxPageSends
	wg     sync.WaitGroup // the reader and the sends

	followDone chan struct{} // closed when follow returns
	followErr  error         // why, set before followDone closes
}

// hello is the page's first message.
type hello struct {
	T     string `json:"t"`
	Token string `json:"token"`
}

// welcome answers a hello the bus accepts.
type welcome struct {
	T             string   `json:"t"`
	Auth          bool     `json:"auth"`
	Token         string   `json:"token"`
	Receive       []string `json:"receive"`
	Emit          []string `json:"emit"`
	Clients       bool     `json:"clients"`
	RowsPerSecond int      `json:"rows_per_second"`
	// TypeRowsPerSecond is the sampler's cap per type (a quarter of the rows), for the page to
	// explain why a busy type shows fewer rows than it has messages.
	TypeRowsPerSecond int   `json:"type_rows_per_second"`
	IntervalMS        int64 `json:"interval_ms"`
}

type ending struct {
	T      string `json:"t"`
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (m *Monitor) serveWS(w http.ResponseWriter, r *http.Request) {
	if !m.addPage() {
		http.Error(w, "too many monitor pages are open, or the monitor is shutting down", http.StatusServiceUnavailable)
		return
	}
	defer m.donePage()
	// CheckOrigin nil: same origin only, so no other site can read the bus
	// through a browser that has this page's address.
	conn, err := ws.Accept(w, r, &ws.AcceptOptions{
		EnableCompression: true,
		MaxMessageSize:    m.bus.Live().MaxMsgSize + 64<<10, // a send: the message plus our envelope
		HandshakeTimeout:  helloTimeout,
	})
	if err != nil {
		m.log.Debug("Monitor handshake failed", "remote", r.RemoteAddr, "error", err)
		return
	}
	p := &page{m: m, conn: conn, remote: r.RemoteAddr, sends: make(chan struct{}, maxPageSends)}
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	if !p.authorize(ctx) {
		return
	}
	// Follow before the welcome: a page that has it misses nothing relayed
	// afterwards.
	f := m.bus.Follow(bus.FollowOptions{Name: "monitor " + r.RemoteAddr})
	defer f.Close()
	if p.write(ctx, p.welcome()) != nil {
		return
	}
	m.log.Info("Monitor page connected", "remote", p.remote, "token", tokenName(p.perm))

	p.followDone = make(chan struct{})
	go func() {
		p.followErr = p.follow(ctx, f)
		close(p.followDone)
	}()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.readLoop(ctx, cancel)
	}()
	// The reader reads on until the socket is closed: when the monitor ends a
	// page, the close below counts on it to see the page's answering close.
	err = p.writeLoop(ctx)
	cancel()
	<-p.followDone
	defer p.wg.Wait()

	var e ending
	code, reason := ws.StatusNormalClosure, ""
	switch {
	case errors.Is(err, bus.ErrLagged):
		e = ending{T: "end", Reason: "lagged", Error: "the monitor fell behind the bus and was cut, like any slow client"}
		code, reason = ws.StatusPolicyViolation, "slow consumer"
		m.log.Warn("Monitor page cut: it fell behind the bus", "remote", p.remote)
	case errors.Is(err, bus.ErrServerClosed) || m.ctx.Err() != nil:
		e = ending{T: "end", Reason: "shutdown", Error: "the bus is shutting down"}
		code, reason = ws.StatusGoingAway, "shutting down"
	default:
		m.log.Debug("Monitor page gone", "remote", p.remote, "error", err)
	}
	if e.T != "" {
		p.write(context.Background(), e)
	}
	conn.Close(code, reason)
}

// addPage counts a new page in, unless MaxPages are open or Shutdown has
// begun (it waits for the pages counted in).
func (m *Monitor) addPage() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil || m.open >= m.opts.MaxPages {
		return false
	}
	m.open++
	m.pages.Add(1)
	return true
}

func (m *Monitor) donePage() {
	m.mu.Lock()
	m.open--
	m.mu.Unlock()
	m.pages.Done()
}

// authorize reads the page's hello and checks its token; false means the
// page was refused (and told why) or is gone.
func (p *page) authorize(ctx context.Context) bool {
	hctx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	op, b, err := p.conn.ReadMessage(hctx)
	var h hello
	if err != nil || op != ws.OpText || json.Unmarshal(b, &h) != nil || h.T != "hello" {
		p.conn.Close(ws.StatusPolicyViolation, "expected a hello")
		return false
	}
	perm, ok := p.m.bus.Authorize(h.Token, p.remote)
	if !ok {
		why := "this bus needs a token"
		if h.Token != "" {
			why = "the bus does not know this token"
		}
		p.m.log.Warn("Monitor page refused: missing or unknown token", "remote", p.remote)
		p.write(ctx, ending{T: "denied", Error: why})
		p.conn.Close(ws.StatusPolicyViolation, "unauthorized")
		return false
	}
	p.perm = perm
	p.full = perm == nil
	o := p.m.opts
	perBatch := func(perSecond int) int { return max(1, int(int64(perSecond)*int64(o.Interval)/int64(time.Second))) }
	p.smp = newSampler(perm, perBatch(o.RowsPerSecond), o.MaxPayload, perBatch(o.BytesPerSecond))
	return true
}

// welcome answers the hello of an authorized page.
func (p *page) welcome() welcome {
	o := p.m.opts
	wel := welcome{
		T:                 "hello",
		Auth:              p.m.bus.Live().Auth.Enabled(),
		Clients:           p.full,
		RowsPerSecond:     o.RowsPerSecond,
		TypeRowsPerSecond: int(int64(p.smp.perType) * int64(time.Second) / int64(o.Interval)),
		IntervalMS:        o.Interval.Milliseconds(),
	}
	if p.perm != nil {
		wel.Token, wel.Receive, wel.Emit = p.perm.Name, p.perm.Receive, p.perm.Emit
	}
	return wel
}

func tokenName(p *bus.Permissions) string {
	if p == nil {
		return ""
	}
	return p.Name
}

// follow reads the log into the sampler until the follower is cut, the bus
// stops or ctx ends. It does nothing else, so that it keeps up with the bus.
func (p *page) follow(ctx context.Context, f *bus.Follower) error {
	buf := make([]bus.Frame, 0, maxPageFrames)
	for {
		if p.m.beforeNext != nil {
			p.m.beforeNext()
		}
		var err error
		buf, err = f.Next(ctx, buf[:0])
		if err != nil {
			return err
		}
		p.smp.add(buf)
		clear(buf) // hold no payload while waiting
	}
}

// writeLoop sends a batch every interval and the client list every second
// until the follower ends (its error is returned) or ctx does.
func (p *page) writeLoop(ctx context.Context) error {
	tick := time.NewTicker(p.m.opts.Interval)
	defer tick.Stop()
	var lastClients time.Time
	for {
		if time.Since(lastClients) >= clientsEvery {
			lastClients = time.Now()
			if err := p.write(ctx, p.clients()); err != nil {
				return err
			}
		}
		select {
		case <-p.followDone:
			if b, ok := p.smp.take(); ok { // what arrived before the end
				p.write(ctx, b)
			}
			return p.followErr
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if b, ok := p.smp.take(); ok {
			if err := p.write(ctx, b); err != nil {
				return err
			}
		}
	}
}

// write sends one message to the page, bounded by writeTimeout. The Conn
// serialises writes, so the send replies may call it from their goroutines.
func (p *page) write(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return p.conn.WriteMessage(wctx, ws.OpText, b)
}

// readLoop takes the page's sends until the socket ends; then it cancels
// ctx. It does not stop when ctx ends (the closing handshake needs a
// reader), but starts no send after that.
func (p *page) readLoop(ctx context.Context, cancel context.CancelFunc) {
	defer cancel()
	for {
		op, b, err := p.conn.ReadMessage(context.Background())
		if err != nil {
			return
		}
		var req sendRequest
		if ctx.Err() != nil || op != ws.OpText || json.Unmarshal(b, &req) != nil || req.T != "send" {
			continue // ending, or not ours to answer
		}
		select {
		case p.sends <- struct{}{}:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.sends }()
				p.write(ctx, p.m.send(ctx, p.perm, req))
			}()
		default:
			p.write(ctx, sendReply{T: "sent", ID: req.ID, Error: "too many sends are waiting for a response"})
		}
	}
}
