package bus

import "github.com/ovbus/ovbus/ws"

// The message-rate limit of a client whose permissions set one
// (Permissions.Rate and Burst): a token bucket, checked by the client's
// reader before a frame is relayed. A client over it is closed, so a
// flooding client costs the others at most its burst: the rest of its
// flood is never relayed, and the reader that would read it ends.

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

// take takes a token for one message at hub time now, and reports whether
// there was one.
func (b *bucket) take(now int64) bool {
	if d := now - b.last; d > 0 {
		b.tokens = min(b.burst, b.tokens+float64(d)*b.perNS)
		b.last = now
	}
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
	if c.finish(reasonRateLimited, ws.StatusPolicyViolation, rateLimitReason, "identity", c.acc.identity, "rate", c.acc.rate, "burst", c.acc.burst) {
		c.conn.Close(ws.StatusPolicyViolation, rateLimitReason)
	}
}
