package ws

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// writeSizes is a net.Conn that records the size of every Write.
type writeSizes struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (w *writeSizes) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.sizes = append(w.sizes, len(b))
	w.mu.Unlock()
	return w.Conn.Write(b)
}

// TestStagedWrite: a plain server message larger than stageChunk goes out
// in writes of at most stageChunk of its payload (behind the frames buffered
// before it, in the first), and arrives whole and in order; one of
// stageChunk bytes or less goes out in one write with the frame's header.
func TestStagedWrite(t *testing.T) {
	srv, cli := net.Pipe()
	ws := &writeSizes{Conn: srv}
	sc := newConn(ws, connConfig{role: RoleServer})
	cc := newConn(cli, connConfig{role: RoleClient, maxMessageSize: 4 * stageChunk, maxFrameSize: 4 * stageChunk})
	defer sc.CloseNow()
	defer cc.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	type msg struct {
		op Opcode
		b  []byte
	}
	got := make(chan msg, 16)
	go func() {
		for {
			op, b, err := cc.ReadMessage(ctx)
			if err != nil {
				close(got)
				return
			}
			got <- msg{op, b}
		}
	}()
	payload := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i%251)
		}
		return b
	}
	for _, c := range []struct {
		size   int
		writes int // writes of the large message, the buffered frame's included
	}{
		{stageChunk, 1},
		{stageChunk + 1, 2},
		{2*stageChunk + 3, 3},
	} {
		small := payload(10, 1)
		large := payload(c.size, 7)
		if err := sc.BufferMessage(BinaryMessage, small); err != nil {
			t.Fatal(err)
		}
		ws.mu.Lock()
		ws.sizes = ws.sizes[:0]
		ws.mu.Unlock()
		if err := sc.WriteMessage(ctx, BinaryMessage, large); err != nil {
			t.Fatalf("size %d: %v", c.size, err)
		}
		for _, want := range [][]byte{small, large} {
			m, ok := <-got
			if !ok || m.op != BinaryMessage || !bytes.Equal(m.b, want) {
				t.Fatalf("size %d: got %d bytes (ok %v), want %d", c.size, len(m.b), ok, len(want))
			}
		}
		ws.mu.Lock()
		sizes := append([]int(nil), ws.sizes...)
		ws.mu.Unlock()
		if len(sizes) != c.writes {
			t.Fatalf("size %d: %d writes %v, want %d", c.size, len(sizes), sizes, c.writes)
		}
		total := 0
		for i, n := range sizes {
			total += n
			// The first write holds the buffered frame (2+10 bytes) and
			// the header (at most 10) besides its part of the payload.
			if limit := stageChunk + 2*MaxHeaderSize + len(small); n > limit || (i > 0 && n > stageChunk) {
				t.Fatalf("size %d: write %d of %d bytes, over the bound", c.size, i, n)
			}
		}
		if want := 2 + len(small) + len(AppendHeader(nil, Header{Fin: true, Op: OpBinary, Length: int64(c.size)})) + c.size; total != want {
			t.Fatalf("size %d: %d bytes written, want %d", c.size, total, want)
		}
	}
}
