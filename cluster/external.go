package cluster

import (
	"github.com/nats-io/nats.go"
)

// externalAuth returns the nats.go options for an external server's
// credentials and TLS.
func externalAuth(o *Options) []nats.Option {
	var opts []nats.Option
	switch {
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" || o.TLSCert != "" {
		opts = append(opts, nats.Secure())
	}
	return opts
}
