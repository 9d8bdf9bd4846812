package cluster

import (
	"bytes"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/ovbus/ovbus/ws"
)

func TestBatchRoundTrip(t *testing.T) {
	n := &Node{o: Options{NodeName: "a"}, incStr: "77"}
	frames := []outFrame{{ws.OpText, []byte(`{"type":"x"}`)}, {ws.OpBinary, []byte{0, 1, 2}}, {ws.OpText, nil}, {ws.OpText, bytes.Repeat([]byte("y"), 300)}}
	om := n.newOutMsg(5, frames)
	if om.hdr.Get(hdrBatch) != "4" || om.hdr.Get(hdrOrigin) != "a" || om.hdr.Get(hdrSeq) != "5" || om.last() != 8 {
		t.Fatalf("header %v, last %d", om.hdr, om.last())
	}
	m, err := parseMsg(om.hdr, om.data)
	if err != nil {
		t.Fatal(err)
	}
	if m.origin != "a" || m.inc != 77 || m.first != 5 || m.count != 4 {
		t.Fatalf("parsed %+v", m)
	}
	var got []outFrame
	if err := m.each(0, func(op ws.Opcode, p []byte) { got = append(got, outFrame{op, p}) }); err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		if got[i].op != frames[i].op || !bytes.Equal(got[i].payload, frames[i].payload) {
			t.Errorf("frame %d: %v, want %v", i, got[i], frames[i])
		}
	}
	got = got[:0]
	m.each(2, func(op ws.Opcode, p []byte) { got = append(got, outFrame{op, p}) })
	if len(got) != 2 || !bytes.Equal(got[1].payload, frames[3].payload) {
		t.Errorf("from frame 2: %v", got)
	}
	for _, bad := range []struct {
		data  []byte
		count int
	}{{om.data, 5}, {om.data, 3}, {om.data[:len(om.data)-1], 4}, {[]byte{1, 9, 'x'}, 1}} {
		calls := 0
		if err := splitBatch(bad.data, bad.count, func(ws.Opcode, []byte) { calls++ }); err == nil || calls != 0 {
			t.Errorf("count %d of %d bytes: error %v after %d frames", bad.count, len(bad.data), err, calls)
		}
	}
	// One frame alone is a plain message: the frame's bytes, unchanged
	// (and a copy: the bus's log reuses its buffers).
	p := []byte{9, 8}
	one := n.newOutMsg(9, []outFrame{{ws.OpBinary, p}})
	p[0] = 0
	if one.hdr.Get(hdrBatch) != "" || one.hdr.Get(hdrOp) != "binary" || !bytes.Equal(one.data, []byte{9, 8}) {
		t.Errorf("single frame message: %v %q", one.hdr, one.data)
	}
	if !fits(0, 0, 10<<20) || fits(maxBatchFrames, 0, 1) || fits(1, maxBatchBytes, 1) {
		t.Error("fits")
	}
	h := nats.Header{}
	for k, v := range om.hdr {
		h[k] = v
	}
	h.Del(hdrInc)
	if _, err := parseMsg(h, om.data); err == nil {
		t.Error("a message without Ovbus-Inc parsed")
	}
}

func FuzzSplitBatch(f *testing.F) {
	n := &Node{o: Options{NodeName: "a"}}
	f.Add(n.newOutMsg(1, []outFrame{{ws.OpText, []byte("a")}, {ws.OpBinary, []byte("bc")}}).data, 2)
	f.Fuzz(func(t *testing.T, data []byte, count int) {
		if count < 0 || count > 1000 {
			return
		}
		splitBatch(data, count, func(op ws.Opcode, p []byte) {
			if op != ws.OpText && op != ws.OpBinary {
				t.Fatalf("opcode %v", op)
			}
		})
	})
}
