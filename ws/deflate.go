package ws

import (
	stdflate "compress/flate"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// How permessage-deflate works here (RFC 7692).
//
// The negotiated DeflateParams tell each side whether the other keeps its
// LZ77 window between messages (context takeover, §7.1.1) and how large the
// window may be (§7.1.2); when the peer limits our window below 32 KiB the
// compressor never refers further back. Messages are compressed with a sync
// flush and the trailing 00 00 ff ff removed (§7.2.1); RSV1 marks the first
// frame of a compressed message (§6). A compressed message is collected
// compressed until its last frame, then inflated in pieces of at most
// 32 KiB with the tail appended again (§7.2.2), keeping the last 32 KiB as
// the dictionary when the peer uses context takeover. Inflation is bounded
// by MaxMessageSize for every read (startInflate), so a small compressed
// message cannot make the endpoint inflate a large one into memory.

// DeflateParams are the negotiated permessage-deflate parameters
// (RFC 7692 §7.1), named as in the extension negotiation; the Protocol's
// Role decides which half applies to its own compressor and which to the
// peer's.
type DeflateParams struct {
	ServerNoContextTakeover bool // §7.1.1.1
	ClientNoContextTakeover bool // §7.1.1.2
	ServerMaxWindowBits     int  // §7.1.2.1: 8..15, 0 means 15
	ClientMaxWindowBits     int  // §7.1.2.2: 8..15, 0 means 15
}

// CompressionOptions tune the compression of outgoing messages.
type CompressionOptions struct {
	// Level is a flate level: 1 (fastest) .. 9 (best), -1 (default, 5) or
	// -2 (Huffman only). 0 means DefaultCompressionLevel.
	Level int
	// Threshold is the smallest payload that is compressed; shorter
	// messages are sent uncompressed (RFC 7692 §6.1 lets a sender choose
	// per message). 0 means DefaultCompressionThreshold, < 0 compresses
	// every message.
	Threshold int
	// Context, when > 0, is how many bytes of the messages sent before a
	// compressed message may refer back to (context takeover, RFC 7692
	// §7.1.1), where the peer allows it; a server then no longer asks for
	// server_no_context_takeover. The connection keeps that many bytes (at
	// most 32 KiB; none when the peer limits the window below 32 KiB, and a
	// server then says server_no_context_takeover) and borrows a pooled
	// compressor per message, so memory stays bounded. Small, repetitive
	// messages shrink most. A PreparedMessage written to such a connection is
	// compressed for it, with its context. 0: a server asks for
	// server_no_context_takeover, and a client keeps its whole compressor
	// between messages when the server allows it (about 500 KiB at level 1).
	Context int
}

// Compression defaults.
const (
	DefaultCompressionLevel     = flate.BestSpeed
	DefaultCompressionThreshold = 128
)

func (co CompressionOptions) normalize() CompressionOptions {
	if co.Level == 0 || co.Level < flate.HuffmanOnly || co.Level > flate.BestCompression {
		co.Level = DefaultCompressionLevel
	}
	if co.Threshold == 0 {
		co.Threshold = DefaultCompressionThreshold
	}
	if co.Threshold < 0 {
		co.Threshold = 0
	}
	return co
}

func windowBits(b int) int {
	if b == 0 || b > 15 {
		return 15
	}
	if b < 8 {
		return 8
	}
	return b
}

// deflateTail is appended to a compressed message before inflating it:
// the 00 00 ff ff the sender stripped (RFC 7692 §7.2.2), then an empty
// final stored block so that the inflater reports io.EOF at the end of the
// message instead of io.ErrUnexpectedEOF.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// syncMarker ends every sync-flushed compressed message (RFC 7692 §7.2.1).
var syncMarker = []byte{0x00, 0x00, 0xff, 0xff}

const (
	maxWindow    = 1 << 15 // LZ77 window kept for context takeover
	inflateChunk = 32 << 10
)

// sink is the io.Writer the flate writers write into.
type sink struct{ b []byte }

func (s *sink) Write(p []byte) (int, error) {
	s.b = append(s.b, p...)
	return len(p), nil
}

type flateWriter struct {
	fw *flate.Writer
	s  sink
}

// Writer pools, by level (-2..9 -> 0..11) and by window bits below 15
// (8..14 -> 12..18).
var writerPools [19]sync.Pool

func writerPoolIndex(level, bits int) int {
	if bits < 15 {
		return 12 + bits - 8
	}
	return level + 2
}

// getWriter returns a reset flate writer. For a window smaller than 32 KiB
// it uses klauspost's window-limited encoder, which never emits a distance
// larger than the window, so the output is valid for a peer that asked for
// that server_max_window_bits / client_max_window_bits (RFC 7692 §7.1.2).
func getWriter(level, bits int) *flateWriter {
	i := writerPoolIndex(level, bits)
	if w, ok := writerPools[i].Get().(*flateWriter); ok {
		w.fw.Reset(&w.s)
		return w
	}
	w := &flateWriter{}
	var err error
	if bits < 15 {
		w.fw, err = flate.NewWriterWindow(&w.s, 1<<bits)
	} else {
		w.fw, err = flate.NewWriter(&w.s, level)
	}
	if err != nil {
		panic("ws: " + err.Error()) // levels and windows are normalised
	}
	return w
}

func putWriter(level, bits int, w *flateWriter) {
	w.s.b = nil
	writerPools[writerPoolIndex(level, bits)].Put(w)
}

// compress appends the compressed form of payload to dst: deflate, sync
// flush, and the trailing 00 00 ff ff removed (RFC 7692 §7.2.1).
func compress(w *flateWriter, dst, payload []byte) ([]byte, error) {
	w.s.b = dst
	if _, err := w.fw.Write(payload); err != nil {
		return dst, err
	}
	if err := w.fw.Flush(); err != nil {
		return dst, err
	}
	out := w.s.b
	w.s.b = nil
	if len(out)-len(dst) < 4 || string(out[len(out)-4:]) != string(syncMarker) {
		return dst, errors.New("ws: deflate output lacks the sync marker")
	}
	return out[:len(out)-4], nil
}

// Inflating uses the standard library's compress/flate: klauspost's
// inflater (v1.20.4) keeps the Huffman tables of an earlier stream across
// Reset when a block declares an empty distance tree, so corrupt input
// would decode differently depending on which pooled reader it got.
var readerPool sync.Pool

type flateReader struct {
	fr io.ReadCloser // implements flate.Resetter
}

func getReader(src io.Reader, dict []byte) *flateReader {
	if r, ok := readerPool.Get().(*flateReader); ok {
		_ = r.fr.(stdflate.Resetter).Reset(src, dict)
		return r
	}
	return &flateReader{fr: stdflate.NewReaderDict(src, dict)}
}

func putReader(r *flateReader) {
	_ = r.fr.(stdflate.Resetter).Reset(&emptySource, nil)
	readerPool.Put(r)
}

var emptySource inflateSource

// inflateSource feeds a compressed message followed by deflateTail to the
// inflater; it implements io.ByteReader so that the inflater does not wrap
// it in a bufio.Reader.
type inflateSource struct {
	a, b []byte
}

func (s *inflateSource) Read(p []byte) (int, error) {
	if len(s.a) == 0 {
		s.a, s.b = s.b, nil
		if len(s.a) == 0 {
			return 0, io.EOF
		}
	}
	n := copy(p, s.a)
	s.a = s.a[n:]
	return n, nil
}

func (s *inflateSource) ReadByte() (byte, error) {
	if len(s.a) == 0 {
		s.a, s.b = s.b, nil
		if len(s.a) == 0 {
			return 0, io.EOF
		}
	}
	c := s.a[0]
	s.a = s.a[1:]
	return c, nil
}

var chunkPool = sync.Pool{New: func() any { b := make([]byte, inflateChunk); return &b }}

// deflateState is a Protocol's permessage-deflate state.
type deflateState struct {
	params *DeflateParams // as negotiated (Conn.Deflate)

	// compression (our side)
	level     int
	bits      int  // our max window bits
	takeover  bool // we keep the LZ77 window between messages
	threshold int
	w         *flateWriter // held between messages only with takeover and no ctxMax
	cbuf      []byte
	// With ctxMax > 0 (CompressionOptions.Context), takeover keeps ctx, the
	// last ctxMax plain bytes of the compressed messages sent, instead of a
	// compressor: each message is compressed against them as a dictionary.
	ctxMax int
	ctx    []byte

	// decompression (the peer's side)
	peerTakeover bool
	zbuf         []byte  // compressed message being received
	zbufp        *[]byte // zbuf's pool handle when it came from bufPools
	zcharge      charge  // what zbuf holds of the Budget
	src          inflateSource
	r            *flateReader
	dict         []byte // last 32 KiB of inflated data, for context takeover
	out          *[]byte
	outDone      bool // out may be returned to the pool at the next call
	inflated     int64
}

func newDeflateState(role Role, dp DeflateParams, co CompressionOptions) *deflateState {
	co = co.normalize()
	d := &deflateState{level: co.Level, threshold: co.Threshold}
	if role == RoleServer {
		d.bits = windowBits(dp.ServerMaxWindowBits)
		d.takeover = !dp.ServerNoContextTakeover
		d.peerTakeover = !dp.ClientNoContextTakeover
	} else {
		d.bits = windowBits(dp.ClientMaxWindowBits)
		d.takeover = !dp.ClientNoContextTakeover
		d.peerTakeover = !dp.ServerNoContextTakeover
	}
	if d.takeover && co.Context > 0 {
		if d.bits < 15 {
			// A dictionary may reach further back than the peer's window (a
			// server says server_no_context_takeover then: Accept).
			d.takeover = false
		} else {
			d.ctxMax = min(co.Context, maxWindow)
		}
	}
	return d
}

// contextual reports whether messages are compressed against the context
// kept between them (CompressionOptions.Context).
func (d *deflateState) contextual() bool { return d.ctxMax > 0 }

// addContext records payload, sent compressed (so now in the peer's
// window), as the newest bytes of the context.
func (d *deflateState) addContext(payload []byte) {
	if len(payload) >= d.ctxMax {
		d.ctx = append(d.ctx[:0], payload[len(payload)-d.ctxMax:]...)
		return
	}
	if d.ctx == nil {
		d.ctx = make([]byte, 0, d.ctxMax)
	}
	if keep := d.ctxMax - len(payload); len(d.ctx) > keep {
		d.ctx = d.ctx[:copy(d.ctx, d.ctx[len(d.ctx)-keep:])]
	}
	d.ctx = append(d.ctx, payload...)
}

// appendCompressed appends a compressed data message (RSV1 set on its only
// frame, RFC 7692 §6.1).
func (d *deflateState) appendCompressed(dst []byte, op Opcode, payload []byte, mask bool) ([]byte, error) {
	w := d.w
	if w == nil {
		w = getWriter(d.level, d.bits)
	}
	if d.contextual() {
		w.fw.ResetDict(&w.s, d.ctx)
	}
	var err error
	d.cbuf, err = compress(w, d.cbuf[:0], payload)
	switch {
	case d.contextual():
		w.fw.ResetDict(nil, nil) // the pooled writer keeps no dictionary
		putWriter(d.level, d.bits, w)
		if err == nil {
			d.addContext(payload)
		} else {
			d.ctx = d.ctx[:0] // the peer's window is not known any more
		}
	case d.takeover && err == nil:
		d.w = w
	default:
		d.w = nil
		putWriter(d.level, d.bits, w)
	}
	if err != nil {
		return dst, err
	}
	h := Header{Fin: true, Rsv1: true, Op: op, Length: int64(len(d.cbuf))}
	if mask {
		h.Masked = true
		putMask(&h)
	}
	dst = AppendHeader(dst, h)
	start := len(dst)
	dst = append(dst, d.cbuf...)
	if mask {
		MaskBytes(h.Mask, 0, dst[start:])
	}
	if cap(d.cbuf) > keepBuf {
		d.cbuf = nil // a connection keeps no large encode buffer
	}
	return dst, nil
}

// resetCompressor drops our LZ77 window, needed when a frame compressed
// elsewhere (a PreparedMessage) was sent on a context-takeover connection.
func (d *deflateState) resetCompressor() {
	if d.w != nil {
		putWriter(d.level, d.bits, d.w)
		d.w = nil
	}
}

// appendInput collects compressed payload of the message being received.
// The compressed size is bounded by the message limit plus the worst-case
// deflate overhead of stored blocks, and charged to the Budget. The buffer
// grows with the data (growCap), from the pools.
func (d *deflateState) appendInput(chunk []byte, maxMsg int64) *ProtocolError {
	n := len(d.zbuf) + len(chunk)
	limit := int64(-1)
	if maxMsg >= 0 {
		limit = maxMsg + maxMsg>>8 + 1024
		if int64(n) > limit {
			return errMsgTooBig
		}
	}
	if !d.zcharge.grow(n) {
		return errBusy
	}
	if n > cap(d.zbuf) {
		bp, nb := getBuf(growCap(len(d.zbuf), n, limit, true))
		nb = append(nb, d.zbuf...)
		putBuf(d.zbufp, d.zbuf)
		d.zbuf, d.zbufp = nb, bp
	}
	d.zbuf = append(d.zbuf, chunk...)
	return nil
}

// maxInflateRatio bounds what deflate data can inflate to: at most 1032
// bytes per compressed byte. The densest output is a length/distance pair:
// at most 258 bytes (RFC 1951 §3.2.5, code 285) for a length code and a
// distance code of at least one bit each (§3.2.7), so 1032 bytes per eight
// bits; literals, stored blocks and block headers give less. It is zlib's
// "theoretical limit ... 1032:1" (zlib.net/zlib_tech.html); a context
// takeover dictionary does not raise it (pairs only refer back into it).
const maxInflateRatio = 1032

// mayExceed reports whether n bytes of deflate data (with deflateTail) could
// inflate past maxMsg bytes (>= 0): n × maxInflateRatio > maxMsg, written
// without the multiplication that could overflow.
func mayExceed(n int, maxMsg int64) bool {
	return int64(n+len(deflateTail)) > maxMsg/maxInflateRatio
}

// startInflate prepares the inflater for the collected message
// (RFC 7692 §7.2.2). When its compressed bytes could inflate past maxMsg
// (mayExceed), it first inflates them into nothing, counting (measure), and
// fails with 1009 once the count passes the limit: a message too big is
// refused before its inflated bytes are held or charged anywhere, whatever
// the reader. A message that fits is then inflated again, for real.
func (d *deflateState) startInflate(maxMsg int64) *ProtocolError {
	d.src = inflateSource{a: d.zbuf, b: deflateTail}
	var dict []byte
	if d.peerTakeover {
		dict = d.window()
	}
	d.r = getReader(&d.src, dict)
	d.inflated = 0
	if maxMsg < 0 || !mayExceed(len(d.zbuf), maxMsg) {
		return nil
	}
	if perr := d.measure(maxMsg); perr != nil {
		return perr
	}
	d.src = inflateSource{a: d.zbuf, b: deflateTail}
	_ = d.r.fr.(stdflate.Resetter).Reset(&d.src, dict) // the dictionary is unchanged
	return nil
}

// measure inflates the message into the output piece, over and over, and
// counts: it holds the inflater's window and one 32 KiB piece, whatever the
// message inflates to. It reads at most maxMsg+1 bytes, fails with 1009
// past maxMsg and with 1007 on corrupt data, as the real inflation would
// (text is validated by the real inflation only).
func (d *deflateState) measure(maxMsg int64) *ProtocolError {
	if d.out == nil {
		d.out = chunkPool.Get().(*[]byte)
	}
	buf := *d.out
	var n int64
	for {
		b := buf
		if room := maxMsg - n + 1; room < int64(len(b)) {
			b = b[:room]
		}
		m, err := d.r.fr.Read(b)
		n += int64(m)
		if n > maxMsg {
			return errMsgTooBig
		}
		if err == io.EOF {
			return nil
		}
		if err != nil || m == 0 {
			return errBadDeflate
		}
	}
}

// finishInflate releases the inflater after the message.
func (d *deflateState) finishInflate() {
	if d.r != nil {
		putReader(d.r)
		d.r = nil
	}
	d.src = inflateSource{}
	// The compressed input goes back to the pools after every message,
	// small ones too: an idle connection holds none (doc.go, "Limits and memory").
	putBuf(d.zbufp, d.zbuf)
	d.zbuf, d.zbufp = nil, nil
	d.zcharge.release()
}

func (d *deflateState) abortInflate() {
	d.finishInflate()
	if d.out != nil {
		d.outDone = true
		d.releaseOut()
	}
}

// releaseOut returns the output buffer of a finished message to the pool;
// called at the start of Next and Receive, when the previous Payload
// becomes invalid.
func (d *deflateState) releaseOut() {
	if d.outDone {
		chunkPool.Put(d.out)
		d.out = nil
		d.outDone = false
	}
}

// addDict keeps the last 32 KiB of inflated data (RFC 7692 §7.2.2: with
// context takeover the peer may refer back into earlier messages). The
// buffer holds up to 64 KiB so that the window is moved only once per
// 32 KiB of data.
func (d *deflateState) addDict(p []byte) {
	if d.dict == nil {
		d.dict = make([]byte, 0, 2*maxWindow)
	}
	if len(p) >= maxWindow {
		d.dict = append(d.dict[:0], p[len(p)-maxWindow:]...)
		return
	}
	if len(d.dict)+len(p) > cap(d.dict) {
		d.dict = d.dict[:copy(d.dict, d.dict[len(d.dict)-maxWindow:])]
	}
	d.dict = append(d.dict, p...)
}

// window returns the last 32 KiB of inflated data.
func (d *deflateState) window() []byte {
	if len(d.dict) > maxWindow {
		return d.dict[len(d.dict)-maxWindow:]
	}
	return d.dict
}

// nextInflated returns the next piece of the inflated message. It inflates
// at most inflateChunk bytes per call, and never more than one byte past
// the message limit, so a small "zip bomb" cannot make it allocate.
func (p *Protocol) nextInflated() (Event, error) {
	d := p.fl
	if d.out == nil {
		d.out = chunkPool.Get().(*[]byte)
	}
	buf := *d.out
	if p.maxMsg >= 0 {
		if room := p.maxMsg - d.inflated + 1; room < int64(len(buf)) {
			buf = buf[:room]
		}
	}
	n := 0
	eof := false
	for n < len(buf) {
		m, err := d.r.fr.Read(buf[n:])
		n += m
		if err == io.EOF {
			eof = true
			break
		}
		if err != nil {
			return p.fail(errBadDeflate)
		}
	}
	d.inflated += int64(n)
	if p.maxMsg >= 0 && d.inflated > p.maxMsg {
		return p.fail(errMsgTooBig)
	}
	piece := buf[:n:n]
	if d.peerTakeover {
		d.addDict(piece)
	}
	if p.msgOp == OpText {
		if !p.utf8.Write(piece) || (eof && !p.utf8.Complete()) {
			return p.fail(errBadUTF8)
		}
	}
	if eof {
		p.inflating = false
		d.finishInflate()
		d.outDone = true
	} else if n == 0 {
		// Cannot happen with a well-behaved inflater; avoid spinning.
		return p.fail(errBadDeflate)
	}
	return Event{Kind: EventMessage, Op: p.msgOp, Payload: piece, Fin: eof}, nil
}

func putMask(h *Header) {
	k := newMaskKey()
	h.Mask = [4]byte{byte(k), byte(k >> 8), byte(k >> 16), byte(k >> 24)}
}
