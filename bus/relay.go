package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"

	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

// The bus's rules for one frame (docs/protocol.md §3, §4), between a
// session's reader (or Emit) and the log. The JSON they need is in
// jsonscan.go, the filter log line in filterlog.go.

// ErrNotAllowed is returned by EmitAs when the permissions forbid the
// frame's type.
var ErrNotAllowed = errors.New("bus: not allowed to emit this message type")

// Sequencer, when Options.Sequencer is set, receives every frame that passed
// the bus's rules (from its sockets and from Emit, and the
// ovos.session.rejected notices the bus sends in their place) instead of
// that frame being appended to the log; the sequencer appends it later with
// Publish, in the order it chooses (a cluster-wide sequence). Sequence runs
// on the sender's reader goroutine, in that sender's order, and must not
// block for long. The payload is a copy the sequencer may keep.
type Sequencer interface {
	Sequence(op ws.Opcode, payload []byte)
}

// relay runs the bus's rules on one frame that c (nil: in-process) sent
// under perms and appends it to the log. JSON is looked at only when a rule
// needs it. It returns ErrNotAllowed when perms forbid the frame's type and
// ErrServerClosed when the bus is shutting down.
func (s *Server) relay(c *session, perms *Permissions, op ws.Opcode, b []byte) error {
	live := s.live.Load()
	s.m.received(len(b))
	if s.closing.Load() {
		return ErrServerClosed // shutting down: nothing new is relayed
	}
	if c != nil && live.opts.MaxMsgSize > 0 && int64(len(b)) > live.opts.MaxMsgSize {
		// The limit was lowered by Apply after this client connected.
		if c.finish(reasonOversize, ws.StatusMessageTooBig, "message too big", "size", len(b)) {
			c.conn.Close(ws.StatusMessageTooBig, "message too big") // on the reader goroutine
		}
		return nil
	}
	var mtype string
	typed := false
	if perms != nil && perms.Emit != nil {
		mtype, typed = messageType(b), true
		if !perms.CanEmit(mtype) {
			s.m.rejected(rejectPermission)
			s.log.Warn("Dropped message: not allowed to emit", "remote", remoteOf(c), "identity", identityOf(c, perms), "msg_type", mtype)
			if c != nil {
				s.tell(c, notAllowedMessage(mtype))
			}
			return ErrNotAllowed
		}
	}
	if carrierSuspect(b) {
		if rej, bad := checkCarrier(b); bad {
			s.rejectCarrier(c, rej)
			return nil
		}
	}
	if live.opts.Filter && s.log.Enabled(context.Background(), slog.LevelDebug) {
		if t, line, ok := filterLine(b); ok && !slices.Contains(live.opts.FilterLogs, t) {
			s.log.Debug(line)
		}
	}
	if live.needTypes && !typed && s.opts.Sequencer == nil {
		mtype = messageType(b)
	}
	var rt *route
	if op == ws.OpText && (live.access.routing || s.router.active.Load() > 0) {
		rt = s.router.routeOf(live.access, c, b) // never with a Sequencer (Options.validate)
	}
	s.accept(op, b, mtype, rt)
	return nil
}

// NotAllowedType is the type of the notice a client gets, and only that client, for each frame
// its token's emit rule forbids: {"type": "ovos.bus.error", "data": {"error": "not allowed",
// "msg_type": TYPE}, "context": {}}. The frame is not relayed and the connection stays open.
// Without auth no frame is forbidden, so no client of a bus without tokens ever sees one.
const NotAllowedType = "ovos.bus.error"

func notAllowedMessage(mtype string) []byte {
	t, _ := json.Marshal(mtype)
	b := make([]byte, 0, 96+len(t))
	b = append(b, `{"type":"`+NotAllowedType+`","data":{"error":"not allowed","msg_type":`...)
	b = append(b, t...)
	return append(b, `},"context":{}}`...)
}

// tell appends a frame to the log for session c alone: it is written to c in its place in the
// log, after the frames relayed before it, whatever c's receive rule. It bypasses the Sequencer:
// a notice is this server's business, not the cluster's.
func (s *Server) tell(c *session, b []byte) {
	if err := s.hub.publishFrame(ws.OpText, b, s.opts.Compression, &frameMeta{born: s.hub.now(), to: c.id}); err != nil {
		s.log.Error("Cannot encode message", "error", err)
	}
}

func remoteOf(c *session) string {
	if c == nil {
		return "in-process"
	}
	return c.remote
}

// identityOf names the sender of a frame in the log: its identity
// (SessionInfo.Identity), or the permissions' name in-process.
func identityOf(c *session, p *Permissions) string {
	if c == nil || c.acc == nil {
		return p.Name
	}
	return c.acc.identity
}

// rejectCarrier drops a frame with a malformed session carrier and tells
// every client, the sender included (docs/protocol.md §3). The connection
// stays open.
func (s *Server) rejectCarrier(c *session, r rejection) {
	s.m.rejected(rejectMalformedCarrier)
	s.log.Warn("Dropped message with a malformed session carrier", "remote", remoteOf(c), "msg_type", string(r.msgType))
	mtype := ""
	if s.live.Load().needTypes {
		mtype = "ovos.session.rejected"
	}
	s.accept(ws.OpText, rejectedMessage(r), mtype, nil)
}

// accept hands a frame that passed the rules to the Sequencer, or appends
// it to the log, private to rt's clients when rt is set (routing.go).
func (s *Server) accept(op ws.Opcode, b []byte, mtype string, rt *route) {
	if q := s.opts.Sequencer; q != nil {
		q.Sequence(op, bytes.Clone(b))
		return
	}
	s.publish(op, b, mtype, "", rt)
}

// publish encodes the frame once (copying it) and appends it to the log.
func (s *Server) publish(op ws.Opcode, b []byte, mtype, origin string, rt *route) {
	if err := s.hub.publishFrame(op, b, s.opts.Compression, &frameMeta{born: s.hub.now(), mtype: mtype, origin: origin, route: rt}); err != nil {
		s.log.Error("Cannot encode message", "error", err)
	}
}

// Publish appends a frame to the log as if it had been relayed, recording
// origin, without the per-client rules and without the Sequencer (for frames
// that already passed them elsewhere). The payload is copied. It returns
// ErrServerClosed after Shutdown.
func (s *Server) Publish(op ws.Opcode, payload []byte, origin string) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if err := checkDataOp(op); err != nil {
		return err
	}
	mtype := ""
	if s.live.Load().needTypes {
		mtype = messageType(payload)
	}
	s.publish(op, payload, mtype, origin, nil)
	return nil
}

// PublishBatch appends frames to the log in their order, as Publish would
// each with its Op, Payload and Origin (their Seq and Time are ignored: the
// log gives them), with two differences: no other frame comes between them,
// and the clients' writers are woken once, after the last, so a client that
// keeps up gets the batch in one write instead of piece by piece while it is
// appended. For frames that arrive together from elsewhere, such as a
// cluster node's batch. The payloads are copied. It returns ErrServerClosed
// after Shutdown, and an error, appending nothing, when a frame is neither
// text nor binary.
func (s *Server) PublishBatch(frames []Frame) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	for _, f := range frames {
		if err := checkDataOp(f.Op); err != nil {
			return err
		}
	}
	var mtypes []string
	if s.live.Load().needTypes {
		mtypes = make([]string, len(frames))
		for i, f := range frames {
			mtypes[i] = messageType(f.Payload)
		}
	}
	if n, err := s.hub.publishFrames(frames, mtypes, s.opts.Compression, s.hub.now()); err != nil {
		s.log.Error("Cannot encode message", "error", err, "frames", n)
	}
	return nil
}

// Emit sends m into the bus, as if a client had sent it: every client and
// every in-process handler receives it, in the bus's one order.
func (s *Server) Emit(m message.Message) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	return s.EmitAs(nil, ws.OpText, b)
}

// EmitRaw sends one frame of type op (ws.OpText or ws.OpBinary) into the
// bus. The frame is copied. The bus's rules apply as to a client's frame.
func (s *Server) EmitRaw(op ws.Opcode, payload []byte) error {
	return s.EmitAs(nil, op, payload)
}

// EmitAs relays a frame under p's emit rule (nil: allowed) and the bus's
// other rules, as if a client holding p had sent it; ErrNotAllowed when p
// forbids its type. The frame is copied.
func (s *Server) EmitAs(p *Permissions, op ws.Opcode, payload []byte) error {
	if s.closing.Load() {
		return ErrServerClosed
	}
	if err := checkDataOp(op); err != nil {
		return err
	}
	return s.relay(nil, p, op, payload)
}

func checkDataOp(op ws.Opcode) error {
	if op != ws.OpText && op != ws.OpBinary {
		return errors.New("bus: not a data opcode")
	}
	return nil
}
