package config

import (
	"maps"
	"slices"
)

// Diff lists the keys whose values differ between old and new, split into
// those the running bus can apply at once (live) and those that take a
// restart (restart). Keys are named as in the configuration: "port",
// "max_msg_size", "log_level". Each field is compared explicitly, so a new
// field must be added here; TestDiffCoversEveryKey checks that.
//
// Live keys apply to messages and connections from the moment of the
// reload: a smaller max_msg_size or queue bound applies to what is read or
// queued afterwards, auth and allowed_origins to connections accepted
// afterwards (the bus may also re-check existing ones), the timeouts to the
// next write, handshake or shutdown.
func Diff(old, new *Config) (live, restart []string) {
	l := func(changed bool, key string) {
		if changed {
			live = append(live, key)
		}
	}
	r := func(changed bool, key string) {
		if changed {
			restart = append(restart, key)
		}
	}
	r(old.Host != new.Host, "host")
	r(old.Port != new.Port, "port")
	r(old.Route != new.Route, "route")
	r(old.SSL != new.SSL, "ssl")
	r(old.SSLCert != new.SSLCert, "ssl_cert")
	r(old.SSLKey != new.SSLKey, "ssl_key")
	l(old.MaxMsgSizeMiB != new.MaxMsgSizeMiB, "max_msg_size")
	l(old.Filter != new.Filter, "filter")
	l(!slices.Equal(old.FilterLogs, new.FilterLogs), "filter_logs")
	// Read by clients only: nothing in the bus to change.
	l(old.SharedConnection != new.SharedConnection, "shared_connection")
	l(old.MaxQueueBytes != new.MaxQueueBytes, "max_queue_bytes")
	l(old.MaxQueueMessages != new.MaxQueueMessages, "max_queue_messages")
	l(old.WriteTimeout != new.WriteTimeout, "write_timeout")
	l(old.HandshakeTimeout != new.HandshakeTimeout, "handshake_timeout")
	l(old.ShutdownTimeout != new.ShutdownTimeout, "shutdown_timeout")
	l(old.CloseFramesOnShutdown != new.CloseFramesOnShutdown, "close_frames_on_shutdown")
	r(old.Compression != new.Compression, "compression")
	r(old.MetricsAddress != new.MetricsAddress, "metrics_address")
	l(!slices.Equal(old.AllowedOrigins, new.AllowedOrigins), "allowed_origins")
	l(!old.Auth.equal(new.Auth), "auth")
	r(old.LogFile != new.LogFile, "log_file")
	l(old.LogLevel != new.LogLevel, "log_level")
	return live, restart
}

func (a Auth) equal(b Auth) bool {
	if a.Required != b.Required || len(a.Tokens) != len(b.Tokens) {
		return false
	}
	return maps.EqualFunc(a.Tokens, b.Tokens, func(p, q Permissions) bool {
		// nil (all types) and empty (no type) differ in meaning.
		return p.Name == q.Name &&
			(p.Emit == nil) == (q.Emit == nil) && slices.Equal(p.Emit, q.Emit) &&
			(p.Receive == nil) == (q.Receive == nil) && slices.Equal(p.Receive, q.Receive)
	})
}
