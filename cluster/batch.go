package cluster

import (
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ovbus/ovbus/ws"
)

// A NATS message carries one or more frames of one node's clients. Its
// data is the frame, unchanged, or, with the header Ovbus-Batch giving
// their number, for each frame in order its length as a uvarint, one byte
// of opcode (ws.OpText or ws.OpBinary) and its bytes, unchanged. A frame
// alone never waits for company: batching only takes what is already
// queued, so it costs no latency and saves, per frame, the NATS message
// and, with order "total", the stream's per-message work.
//
// The headers say whose frames they are and where they stand:
//
//	Ovbus-Origin  the node whose client sent them
//	Ovbus-Inc     the origin's incarnation: when its process started, Unix
//	              nanoseconds; a restarted node numbers its frames afresh
//	Ovbus-Seq     the origin's number of the first frame (1, 2, 3… per
//	              incarnation); a batch of k frames holds Seq … Seq+k-1
//	Ovbus-Sent    when the origin accepted them, Unix nanoseconds
//	Ovbus-Op      "binary" for one binary frame; absent for text
//	Ovbus-Batch   the number of frames, when more than one
//
// Every receiver puts an origin's frames into its log in the origin's
// numbering, once each (inbox.go): that keeps each sender's order through
// every fault, whatever path a frame took.
const (
	hdrOrigin = "Ovbus-Origin"
	hdrInc    = "Ovbus-Inc"
	hdrSeq    = "Ovbus-Seq"
	hdrSent   = "Ovbus-Sent"
	hdrOp     = "Ovbus-Op"
	hdrBatch  = "Ovbus-Batch"
)

// Bounds of one batch.
const (
	maxBatchFrames = 512
	maxBatchBytes  = 256 << 10
)

// outFrame is a frame on its way to the cluster.
type outFrame struct {
	op      ws.Opcode
	payload []byte
}

// outMsg is one message of this node's frames, built once: sent to the
// stream, sent directly to the other nodes, kept for replays (replay.go).
// Its header and data are never modified after newOutMsg, so the same maps
// and bytes go out several times.
type outMsg struct {
	first uint64 // Ovbus-Seq
	count int
	sent  time.Time
	hdr   nats.Header
	data  []byte // owned: never a slice of the bus's log

	// order "total", under the outbox's lock (outbox.go)
	published time.Time // last handed to the stream; zero: not yet
	acked     bool      // the stream stored it
	direct    bool      // sent directly and delivered here
}

func (m *outMsg) last() uint64 { return m.first + uint64(m.count) - 1 }

// msg returns the NATS message of m to subj. Its header is m's, shared:
// nats.go only reads it.
func (m *outMsg) msg(subj string) *nats.Msg {
	return &nats.Msg{Subject: subj, Header: m.hdr, Data: m.data}
}

// newOutMsg numbers frames from first and packs them into one message. The
// payloads are copied.
func (n *Node) newOutMsg(first uint64, frames []outFrame) *outMsg {
	now := time.Now()
	h := nats.Header{
		hdrOrigin: {n.o.NodeName},
		hdrInc:    {n.incStr},
		hdrSeq:    {strconv.FormatUint(first, 10)},
		hdrSent:   {strconv.FormatInt(now.UnixNano(), 10)},
	}
	if n.o.Order == OrderTotal {
		// The stream stores a message offered again (outbox.go) once.
		h[jetstream.MsgIDHeader] = []string{n.o.NodeName + "-" + n.incStr + "-" + h[hdrSeq][0]}
	}
	m := &outMsg{first: first, count: len(frames), sent: now, hdr: h}
	if len(frames) == 1 {
		if frames[0].op == ws.OpBinary {
			h[hdrOp] = []string{"binary"}
		}
		m.data = append([]byte(nil), frames[0].payload...)
		return m
	}
	size := 0
	for _, f := range frames {
		size += binary.MaxVarintLen64 + 1 + len(f.payload)
	}
	data := make([]byte, 0, size)
	for _, f := range frames {
		data = binary.AppendUvarint(data, uint64(len(f.payload)))
		data = append(data, byte(f.op))
		data = append(data, f.payload...)
	}
	h[hdrBatch] = []string{strconv.Itoa(len(frames))}
	m.data = data
	return m
}

// fits reports whether a frame of size bytes may join a batch of n frames
// holding total bytes.
func fits(n, total, size int) bool {
	return n == 0 || n < maxBatchFrames && total+size <= maxBatchBytes
}

// BatchFits is fits for the floor benchmark (bench/cmd/clusterfloor), which
// must cut a queue of frames into messages as the nodes do.
func BatchFits(n, total, size int) bool { return fits(n, total, size) }

// BenchMsg returns the NATS message a node named node sends, with order,
// for text frames numbered from first: its header and data as the node
// builds them (newOutMsg), to subject. For the floor benchmark
// (bench/cmd/clusterfloor), which must send what the nodes send.
func BenchMsg(subject, node string, order Order, first uint64, frames [][]byte) *nats.Msg {
	n := &Node{o: Options{NodeName: node, Order: order}, incStr: "1"}
	out := make([]outFrame, len(frames))
	for i, f := range frames {
		out[i] = outFrame{ws.OpText, f}
	}
	return n.newOutMsg(first, out).msg(subject)
}

// BenchEach calls fn for each frame of a message of a node, as a node
// takes them apart (0 frames when it is not one), for the floor benchmark,
// whose receivers must handle every frame as a bus's clients do.
func BenchEach(m *nats.Msg, fn func(p []byte)) {
	if im, err := parseMsg(m.Header, m.Data); err == nil {
		im.each(0, func(_ ws.Opcode, p []byte) { fn(p) })
	}
}

// inMsg is a message of some node's frames as received.
type inMsg struct {
	origin string
	inc    uint64
	first  uint64
	count  int
	sent   time.Time
	op     ws.Opcode // of a single frame
	batch  bool
	data   []byte
}

func (m *inMsg) last() uint64 { return m.first + uint64(m.count) - 1 }

var errBadMsg = errors.New("cluster: malformed message")

// parseMsg reads a received message's header. The frames stay packed in
// data until each calls for them.
func parseMsg(h nats.Header, data []byte) (*inMsg, error) {
	m := &inMsg{origin: h.Get(hdrOrigin), op: ws.OpText, data: data, count: 1}
	var err1, err2 error
	m.inc, err1 = strconv.ParseUint(h.Get(hdrInc), 10, 64)
	m.first, err2 = strconv.ParseUint(h.Get(hdrSeq), 10, 64)
	if m.origin == "" || err1 != nil || err2 != nil || m.first == 0 {
		return nil, errBadMsg
	}
	if ns, err := strconv.ParseInt(h.Get(hdrSent), 10, 64); err == nil {
		m.sent = time.Unix(0, ns)
	}
	if v := h.Get(hdrBatch); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 2 || k > maxBatchFrames {
			return nil, errBadMsg
		}
		m.count, m.batch = k, true
	} else if h.Get(hdrOp) == "binary" {
		m.op = ws.OpBinary
	}
	return m, nil
}

// inFromOut is one of this node's own messages as its inbox takes it.
func (n *Node) inFromOut(o *outMsg) *inMsg {
	m, _ := parseMsg(o.hdr, o.data) // built by newOutMsg: well formed
	return m
}

// each calls fn for the frames of m from index skip on.
func (m *inMsg) each(skip int, fn func(op ws.Opcode, p []byte)) error {
	if !m.batch {
		if skip == 0 {
			fn(m.op, m.data)
		}
		return nil
	}
	i := 0
	return splitBatch(m.data, m.count, func(op ws.Opcode, p []byte) {
		if i >= skip {
			fn(op, p)
		}
		i++
	})
}

// splitBatch calls fn for each frame of a batch's data; it checks the whole
// batch before the first call.
func splitBatch(data []byte, count int, fn func(op ws.Opcode, p []byte)) error {
	if err := walkBatch(data, count, nil); err != nil {
		return err
	}
	return walkBatch(data, count, fn)
}

func walkBatch(data []byte, count int, fn func(op ws.Opcode, p []byte)) error {
	for i := 0; i < count; i++ {
		l, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < l+1 {
			return errBadMsg
		}
		op := ws.Opcode(data[k])
		if op != ws.OpText && op != ws.OpBinary {
			return errBadMsg
		}
		if fn != nil {
			fn(op, data[k+1:k+1+int(l)])
		}
		data = data[k+1+int(l):]
	}
	if len(data) != 0 {
		return errBadMsg
	}
	return nil
}
