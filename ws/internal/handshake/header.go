package handshake

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// isTokenChar reports whether c is a tchar of RFC 7230 §3.2.6.
func isTokenChar(c byte) bool { return httpguts.IsTokenRune(rune(c)) }

// isToken reports whether s is a non-empty RFC 7230 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// headerHasToken reports whether any element of the comma-separated lists in
// the header field name equals token, ignoring ASCII case (for Upgrade and
// Connection, RFC 7230 §6.1, §6.7).
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for elem := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(elem, " \t"), token) {
				return true
			}
		}
	}
	return false
}

// parseTokenList splits the comma-separated lists of all the header field's
// lines into their elements, skipping empty ones (RFC 7230 §7). ok is false
// when an element is not a token.
func parseTokenList(h http.Header, name string) (list []string, ok bool) {
	for _, v := range h.Values(name) {
		for elem := range strings.SplitSeq(v, ",") {
			elem = strings.Trim(elem, " \t")
			if elem == "" {
				continue
			}
			if !isToken(elem) {
				return nil, false
			}
			list = append(list, elem)
		}
	}
	return list, true
}

// appendHeader appends the fields of h as "Name: value\r\n" lines in sorted
// order, leaving out fields for which skip returns true (given the canonical
// name) and fields with an invalid name or value (no CR/LF injection).
func appendHeader(dst []byte, h http.Header, skip func(canonical string) bool) []byte {
	if len(h) == 0 {
		return dst
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) || skip(http.CanonicalHeaderKey(k)) {
			continue
		}
		for _, v := range h[k] {
			v = strings.Trim(v, " \t")
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	return dst
}

var errHeaderTooLarge = errors.New("header too large")

// readHeaderBlock reads from br the start line and header fields up to and
// including the empty line that ends them, and not one byte more, so that
// WebSocket frames sent right behind the handshake stay in br. It fails
// with errHeaderTooLarge once more than limit bytes were read.
func readHeaderBlock(br *bufio.Reader, limit int) ([]byte, error) {
	if limit <= 0 {
		return nil, errHeaderTooLarge
	}
	buf := make([]byte, 0, min(limit, 1024))
	lineStart := 0
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > limit {
			return nil, errHeaderTooLarge
		}
		buf = append(buf, frag...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF:
			if len(buf) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
		line := buf[lineStart:]
		if len(buf) > len(line) && (len(line) == 1 || len(line) == 2 && line[0] == '\r') {
			return buf, nil // the empty line after at least one line
		}
		lineStart = len(buf)
	}
}

// newBlockReader returns a bufio.Reader over a header block read by
// readHeaderBlock, sized to hold it.
func newBlockReader(block []byte) *bufio.Reader {
	return bufio.NewReaderSize(bytes.NewReader(block), max(len(block), 16))
}
