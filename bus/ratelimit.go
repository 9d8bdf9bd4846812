package bus

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ovbus/ovbus/ws"
)

// The message-rate limit of a client whose permissions set one
// (Permissions.Rate and Burst): a token bucket, checked by the client's
// reader before a frame is relayed. A client over it is closed, so a
// flooding client costs the others at most its burst: the rest of its
// flood is never relayed, and the reader that would read it ends. The
// bucket of a client closed for its rate is kept (spent): a connection
// from the same address under the same identity starts from it, and is
// refused with 429 and Retry-After while it holds no token, before the
// upgrade costs anything. Reconnecting buys no new burst.

// rateLimitReason is the reason of the close frame a client over its rate
// gets (with 1008, policy violation: RFC 6455 §7.4.1).
const rateLimitReason = "message rate limit"

// bucket is a token bucket; only the session's reader touches it.
type bucket struct {
	perNS  float64 // tokens added per nanosecond
	burst  float64 // the most tokens it holds
	tokens float64
	last   int64 // hub time of the last take
}

func newBucket(rate, burst float64, now int64) *bucket {
	return &bucket{perNS: rate / 1e9, burst: burst, tokens: burst, last: now}
}

// refill adds the tokens earned since the last refill, up to the burst.
func (b *bucket) refill(now int64) {
	if d := now - b.last; d > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)*b.perNS)
		b.last = now
	}
}

// wait is how long until the bucket holds a token, after refill.
func (b *bucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.perNS)
}

// take takes a token for one message at hub time now, and reports whether
// there was one.
func (b *bucket) take(now int64) bool {
	b.refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// rateLimited closes a client that sent faster than its rate, on its
// reader (as relay does for a message over a lowered max_msg_size): the
// frame over the limit is not relayed.
func (c *session) rateLimited() {
	c.s.spent.keep(spentKey(c.acc, c.remote), c.limit)
	if c.finish(reasonRateLimited, ws.StatusPolicyViolation, rateLimitReason, "identity", c.acc.identity, "rate", c.acc.rate, "burst", c.acc.burst) {
		c.conn.Close(ws.StatusPolicyViolation, rateLimitReason)
	}
}

// maxSpent bounds the buckets kept for clients closed for their rate; the
// oldest go first.
const maxSpent = 1024

// spentBuckets keeps the buckets of clients closed for their rate, by
// identity and address (spentKey).
type spentBuckets struct {
	mu    sync.Mutex
	by    map[string]bucket
	order []string // oldest first
}

// spentKey is the identity and the host of a remote address.
func spentKey(g *grant, remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		remote = host
	}
	return g.identity + " " + remote
}

func (sb *spentBuckets) keep(key string, b *bucket) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.by == nil {
		sb.by = map[string]bucket{}
	}
	if _, ok := sb.by[key]; !ok {
		sb.order = append(sb.order, key)
	}
	sb.by[key] = *b
	for len(sb.order) > maxSpent {
		delete(sb.by, sb.order[0])
		sb.order = sb.order[1:]
	}
}

// bucket returns the bucket for a new connection of rate and burst at hub
// time now: a copy of the spent one kept for key, else a full one. (A
// spent bucket left long enough refills: an old one costs nothing.)
func (sb *spentBuckets) bucket(key string, rate, burst float64, now int64) *bucket {
	b := newBucket(rate, burst, now)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if old, ok := sb.by[key]; ok && old.last <= now {
		b.tokens, b.last = min(old.tokens, burst), old.last
	}
	return b
}

// limitFor returns the rate limit of a new connection under g from remote
// (nil: none), or false after answering 429 when a client of that identity
// and address was closed for its rate and has earned no token since.
func (s *Server) limitFor(w http.ResponseWriter, g *grant, remote string) (*bucket, bool) {
	if g.rate == 0 {
		return nil, true
	}
	now := s.hub.now()
	b := s.spent.bucket(spentKey(g, remote), g.rate, g.burst, now)
	b.refill(now)
	if wait := b.wait(); wait > 0 {
		s.m.rejected(rejectRateLimited)
		s.log.Warn("Refused connection: over its message rate", "remote", remote, "identity", g.identity)
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		http.Error(w, "message rate limit", http.StatusTooManyRequests)
		return nil, false
	}
	return b, true
}
