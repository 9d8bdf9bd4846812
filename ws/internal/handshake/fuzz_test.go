package handshake

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// chunkReader returns data in pieces whose sizes come from the data itself,
// so that the fuzzer also explores how input is split across reads.
type chunkReader struct {
	data []byte
	seed byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	r.seed = r.seed*31 + 7
	n := min(int(r.seed%23)+1, len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// The seed corpora are in testdata/fuzz/<FuzzName>/; plain go test replays
// them.

func FuzzReadServerRequest(f *testing.F) {
	f.Add([]byte(baseRequest))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(&chunkReader{data: data, seed: byte(len(data))}, 64)
		r, err := ReadServerRequestLimit(br, 1024)
		if err != nil {
			var he *Error
			if errors.As(err, &he) && (he.Status < 400 || he.Status > 499) {
				t.Fatalf("status %d", he.Status)
			}
			return
		}
		// Not a byte past the header block may have been consumed.
		rest, _ := io.ReadAll(br)
		consumed := data[:len(data)-len(rest)]
		if !bytes.HasSuffix(data, rest) || !bytes.HasSuffix(consumed, []byte("\n")) || len(consumed) > 1024 {
			t.Fatalf("consumed %q, left %q", consumed, rest)
		}
		sr, herr := CheckRequest(r)
		if herr != nil {
			if herr.Status != 400 && herr.Status != 405 && herr.Status != 426 || herr.Message == "" {
				t.Fatalf("bad error %+v", herr)
			}
			_ = herr.AppendResponse(nil)
			return
		}
		if !validChallengeKey(sr.Key) {
			t.Fatalf("accepted key %q", sr.Key)
		}
		resp := AppendServerResponse(nil, sr.Key, SelectSubprotocol([]string{"chat"}, sr.Protocols), "", nil)
		if _, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(resp)), nil); err != nil {
			t.Fatalf("our response does not parse: %v", err)
		}
		NegotiateDeflateServer(sr.Extensions, busPolicy)
	})
}

func FuzzParseExtensions(f *testing.F) {
	f.Add("permessage-deflate; client_max_window_bits")
	f.Fuzz(func(t *testing.T, s string) {
		exts, err := ParseExtensionList(s)
		if err != nil {
			return
		}
		for _, e := range exts {
			if !isToken(e.Name) {
				t.Fatalf("name %q", e.Name)
			}
			for _, p := range e.Params {
				if !isToken(p.Name) || p.HasValue != (p.Value != "") || p.HasValue && !isToken(p.Value) {
					t.Fatalf("param %+v", p)
				}
			}
		}
		// Formatting and parsing again gives the same list.
		again, err := ParseExtensionList(FormatExtensions(exts))
		if err != nil || !reflect.DeepEqual(again, exts) {
			t.Fatalf("round trip of %q: %#v, %v; want %#v", s, again, err, exts)
		}
		// Negotiation never panics and agrees with itself.
		resp, sp, ok := NegotiateDeflateServer(exts, busPolicy)
		if ok {
			cp, err := AcceptDeflateResponse(mustParse(t, resp), DeflateParams{ServerMaxWindowBits: sp.ServerMaxWindowBits})
			if err != nil {
				t.Fatalf("our client refuses our server's answer %q to %q: %v", resp, s, err)
			}
			if cp.ServerMaxWindowBits != sp.ServerMaxWindowBits || !cp.ServerNoContextTakeover {
				t.Fatalf("%+v vs %+v", cp, sp)
			}
		}
		AcceptDeflateResponse(exts, DeflateParams{ClientMaxWindowBits: -1})
	})
}

func FuzzReadClientResponse(f *testing.F) {
	f.Add([]byte(okResponse + "\x81\x05Hello"))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(&chunkReader{data: data, seed: byte(len(data))}, 64)
		resp, err := ReadClientResponseLimit(br, 1024)
		if err != nil {
			return
		}
		err = CheckResponse(resp, testKey, []string{"chat"})
		var re *ResponseError
		if errors.As(err, &re) {
			if resp.StatusCode == 101 || len(re.Body) > 3*MaxBodyExcerpt {
				t.Fatalf("ResponseError %+v for status %d", re, resp.StatusCode)
			}
			return
		}
		if resp.StatusCode != 101 {
			t.Fatalf("status %d passed", resp.StatusCode)
		}
		rest, _ := io.ReadAll(br)
		if !bytes.HasSuffix(data, rest) || !bytes.HasSuffix(data[:len(data)-len(rest)], []byte("\n")) {
			t.Fatalf("101 response consumed too much: left %q", rest)
		}
		if err == nil {
			if exts, err := ParseExtensions(resp.Header); err == nil && len(exts) > 0 {
				AcceptDeflateResponse(exts, DeflateParams{ClientMaxWindowBits: -1})
			}
		}
	})
}
