package cluster

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/ovbus/ovbus/ws"
)

// A NATS message carries one frame: its data is the frame, unchanged, and
// Ovbus-Op says "binary" for a binary frame. When frames queue up (a burst,
// a busy stream), one NATS message carries several, with the header
// Ovbus-Batch giving their number: its data is then, for each frame in
// order, the frame's length as a uvarint, one byte of opcode (ws.OpText or
// ws.OpBinary) and the frame's bytes, unchanged. A frame alone never waits
// for company: batching only takes what is already queued, so it costs no
// latency and saves, per frame, the NATS message and, with order "total",
// the stream's per-message work.

const hdrBatch = "Ovbus-Batch"

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

// batchMsg returns the NATS message carrying frames (one or more) to subj.
func (n *Node) batchMsg(subj string, frames []outFrame) *nats.Msg {
	if len(frames) == 1 {
		return &nats.Msg{Subject: subj, Header: n.header(frames[0].op), Data: frames[0].payload}
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
	h := n.header(ws.OpText)
	h[hdrBatch] = []string{strconv.Itoa(len(frames))}
	return &nats.Msg{Subject: subj, Header: h, Data: data}
}

// fits reports whether a frame of size bytes may join a batch of n frames
// holding total bytes.
func fits(n, total, size int) bool {
	return n == 0 || n < maxBatchFrames && total+size <= maxBatchBytes
}

var errBadBatch = errors.New("cluster: malformed batch")

// splitBatch calls fn for each frame of a batch's data.
func splitBatch(data []byte, count int, fn func(op ws.Opcode, p []byte)) error {
	for i := 0; i < count; i++ {
		l, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < l+1 {
			return errBadBatch
		}
		op := ws.Opcode(data[k])
		if op != ws.OpText && op != ws.OpBinary {
			return errBadBatch
		}
		p := data[k+1 : k+1+int(l)]
		fn(op, p)
		data = data[k+1+int(l):]
	}
	if len(data) != 0 {
		return errBadBatch
	}
	return nil
}
