package bus

import "strings"

// httpErrorLog is the error log of the bus's net/http server. A failed TLS
// handshake is one line of it, net/http's only report of one ("http: TLS
// handshake error from ADDR: CAUSE"): it is counted in rejected_total by
// cause (tls_timeout, tls_aborted, tls_not_tls, tls_error) and logged as a
// rate-limited warning. The rest goes to the log at DEBUG.
type httpErrorLog struct{ s *Server }

const tlsHandshakeError = "http: TLS handshake error from "

func (w httpErrorLog) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	rest, ok := strings.CutPrefix(line, tlsHandshakeError)
	if !ok {
		w.s.log.Debug(line)
		return len(p), nil
	}
	remote, cause, _ := strings.Cut(rest, ": ")
	reason := tlsFailure(cause)
	w.s.m.rejected(reason)
	w.s.log.Warn("TLS handshake failed", "remote", remote, "reason", reason, "error", cause)
	return len(p), nil
}

// tlsFailure classifies the cause net/http gives for a failed TLS handshake.
func tlsFailure(cause string) string {
	switch {
	case strings.Contains(cause, "i/o timeout"), strings.Contains(cause, "deadline exceeded"):
		return rejectTLSTimeout
	case cause == "EOF", strings.Contains(cause, "connection reset"), strings.Contains(cause, "broken pipe"),
		strings.Contains(cause, "unexpected EOF"):
		return rejectTLSAborted
	case strings.Contains(cause, "HTTP request to an HTTPS server"), strings.Contains(cause, "does not look like a TLS handshake"):
		return rejectTLSNotTLS
	}
	return rejectTLSError
}
