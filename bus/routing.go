package bus

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
)

// Reply routing (docs/protocol.md §3), for clients whose permissions set
// ReplyRouting (routed clients: satellites, typically). Every other client
// still receives every frame. A frame is private when its
// context.destination names a routed token (Permissions.Name), or when it
// carries a session (context.session.session_id, not "default") that a
// routed client emitted first: the session's owner. A routed client
// receives a private frame only when it sent it or the frame is for it;
// frames that are not private go to everyone. So one satellite's answers,
// which the hub's skills send with its session, reach that satellite and
// the hub's own services, and no other satellite.
//
// An owner that disconnects keeps its sessions, for the same identity to
// take back when it connects again: the answers that come meanwhile go to
// no routed client. The most recently left maxOrphans sessions are kept.
//
// The router costs nothing on a bus without it: relay looks at a frame's
// context only when a permission set routes replies, or a routed client
// admitted before a reload that turned it off is still connected.

// ReplyRoutingClusterMsg is the error of a configuration that routes
// replies on a node of a cluster: the other nodes would deliver a private
// frame to everyone (a route does not travel with the frame).
const ReplyRoutingClusterMsg = "reply_routing is on, and the bus is a node of a cluster: reply routing needs a single node (the other nodes would deliver private frames to every client)"

// Bounds of the router's memory: the sessions one routed client owns (a
// new one past it lets go of its oldest) and the sessions kept for owners
// that left (the oldest are forgotten, and become public).
const (
	maxOwnedSessions = 16
	maxOrphans       = 4096
)

// route says which routed clients may receive a private entry.
type route struct {
	from uint64   // the sender's session id; 0 for a frame emitted in-process
	to   []uint64 // the routed clients the frame is for (maybe none connected)
}

// delivers reports whether a routed client with this id receives the
// entry.
func (r *route) delivers(id uint64) bool { return id == r.from || slices.Contains(r.to, id) }

// routed reports whether c's permissions route replies.
func (c *session) routed() bool { return c.acc != nil && c.acc.routed }

// owner is who owns a session: a connected routed client, or (c nil) the
// identity of the one that left.
type owner struct {
	c        *session
	identity string
}

// router knows the routed clients by name and the sessions they own.
type router struct {
	active atomic.Int32 // routed clients connected

	mu      sync.Mutex
	byName  map[string][]*session
	owners  map[string]owner      // session id → its owner
	owned   map[*session][]string // connected owner → its sessions, oldest first
	orphans []string              // sessions whose owner left, oldest first
}

// join adds c if it is routed (addSession).
func (r *router) join(c *session) {
	if !c.routed() {
		return
	}
	r.mu.Lock()
	if r.byName == nil {
		r.byName, r.owners, r.owned = map[string][]*session{}, map[string]owner{}, map[*session][]string{}
	}
	if n := c.acc.name; n != "" {
		r.byName[n] = append(r.byName[n], c)
	}
	r.mu.Unlock()
	r.active.Add(1)
}

// leave takes c out (removeSession); its sessions wait for its identity.
func (r *router) leave(c *session) {
	if !c.routed() {
		return
	}
	r.mu.Lock()
	if n := c.acc.name; n != "" {
		list := slices.DeleteFunc(r.byName[n], func(d *session) bool { return d == c })
		if len(list) == 0 {
			delete(r.byName, n)
		} else {
			r.byName[n] = list
		}
	}
	for _, sid := range r.owned[c] {
		if r.owners[sid].c == c {
			r.owners[sid] = owner{identity: c.acc.identity}
			r.orphans = append(r.orphans, sid)
		}
	}
	delete(r.owned, c)
	for len(r.orphans) > maxOrphans {
		if sid := r.orphans[0]; r.owners[sid].c == nil {
			delete(r.owners, sid)
		}
		r.orphans = slices.Delete(r.orphans, 0, 1)
	}
	r.mu.Unlock()
	r.active.Add(-1)
}

// routeOf returns the route of a text frame that c sent (nil: emitted
// in-process), or nil when it is for everyone; ac names the routed tokens.
// A routed sender becomes the owner of the frame's session if it has
// none, or takes back its own.
func (r *router) routeOf(ac *access, c *session, b []byte) *route {
	dest, sid := routingContext(b)
	if len(dest) == 0 && sid == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c != nil && c.routed() && sid != "" {
		r.claim(c, sid)
	}
	private := false
	var to []uint64
	add := func(d *session) {
		if !slices.Contains(to, d.id) {
			to = append(to, d.id)
		}
	}
	for _, name := range dest {
		private = private || slices.Contains(ac.routedNames, name)
		for _, d := range r.byName[name] {
			private = true
			add(d)
		}
	}
	if o, ok := r.owners[sid]; ok && sid != "" {
		private = true
		if o.c != nil {
			add(o.c)
		}
	}
	if !private {
		return nil
	}
	rt := &route{to: to}
	if c != nil {
		rt.from = c.id
	}
	return rt
}

// claim makes c the owner of session sid unless another client owns it,
// or one of another identity owned it. Under mu.
func (r *router) claim(c *session, sid string) {
	if o, ok := r.owners[sid]; ok && (o.c != nil || o.identity != c.acc.identity) {
		return
	}
	r.owners[sid] = owner{c, c.acc.identity}
	list := append(r.owned[c], sid)
	if len(list) > maxOwnedSessions {
		if r.owners[list[0]].c == c {
			delete(r.owners, list[0])
		}
		list = slices.Delete(list, 0, 1)
	}
	r.owned[c] = list
}

// routingContext reads what reply routing needs of a frame: the names in
// context.destination (a string or a list of strings) and
// context.session.session_id unless it is "default". Only the context is
// decoded.
func routingContext(b []byte) (dest []string, sid string) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, ""
	}
	raw := b
	if vs, ve, found, sure := findMember(b, i, "context"); sure {
		if !found {
			return nil, ""
		}
		raw = b[vs:ve]
	} else {
		var top struct {
			Context json.RawMessage `json:"context"`
		}
		if json.Unmarshal(b, &top) != nil {
			return nil, ""
		}
		raw = top.Context
	}
	var ctx struct {
		Destination json.RawMessage `json:"destination"`
		Session     json.RawMessage `json:"session"`
	}
	if json.Unmarshal(raw, &ctx) != nil {
		return nil, ""
	}
	var one string
	var many []any
	if json.Unmarshal(ctx.Destination, &one) == nil && one != "" {
		dest = []string{one}
	} else if json.Unmarshal(ctx.Destination, &many) == nil {
		for _, v := range many {
			if s, ok := v.(string); ok && s != "" {
				dest = append(dest, s)
			}
		}
	}
	var sess struct {
		SessionID any `json:"session_id"`
	}
	if json.Unmarshal(ctx.Session, &sess) == nil {
		if s, ok := sess.SessionID.(string); ok && s != "default" {
			sid = s
		}
	}
	return dest, sid
}
