package cluster

import (
	"bytes"
	"testing"

	"github.com/ovbus/ovbus/ws"
)

func TestBatchRoundTrip(t *testing.T) {
	n := &Node{o: Options{NodeName: "a"}}
	frames := []outFrame{{ws.OpText, []byte(`{"type":"x"}`)}, {ws.OpBinary, []byte{0, 1, 2}}, {ws.OpText, nil}, {ws.OpText, bytes.Repeat([]byte("y"), 300)}}
	m := n.batchMsg("s", frames)
	if m.Header.Get(hdrBatch) != "4" || m.Header.Get(hdrOrigin) != "a" {
		t.Fatalf("header %v", m.Header)
	}
	var got []outFrame
	if err := splitBatch(m.Data, 4, func(op ws.Opcode, p []byte) { got = append(got, outFrame{op, p}) }); err != nil {
		t.Fatal(err)
	}
	for i := range frames {
		if got[i].op != frames[i].op || !bytes.Equal(got[i].payload, frames[i].payload) {
			t.Errorf("frame %d: %v, want %v", i, got[i], frames[i])
		}
	}
	for _, bad := range []struct {
		data  []byte
		count int
	}{{m.Data, 5}, {m.Data, 3}, {m.Data[:len(m.Data)-1], 4}, {[]byte{1, 9, 'x'}, 1}} {
		if err := splitBatch(bad.data, bad.count, func(ws.Opcode, []byte) {}); err == nil {
			t.Errorf("count %d of %d bytes: no error", bad.count, len(bad.data))
		}
	}
	// One frame alone is a plain message: the frame's bytes, unchanged.
	one := n.batchMsg("s", frames[1:2])
	if one.Header.Get(hdrBatch) != "" || one.Header.Get(hdrOp) != "binary" || !bytes.Equal(one.Data, frames[1].payload) {
		t.Errorf("single frame message: %v %q", one.Header, one.Data)
	}
	if !fits(0, 0, 10<<20) || fits(maxBatchFrames, 0, 1) || fits(1, maxBatchBytes, 1) {
		t.Error("fits")
	}
}

func FuzzSplitBatch(f *testing.F) {
	n := &Node{o: Options{NodeName: "a"}}
	f.Add(n.batchMsg("s", []outFrame{{ws.OpText, []byte("a")}, {ws.OpBinary, []byte("bc")}}).Data, 2)
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
