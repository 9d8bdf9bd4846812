package clusterconf

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNamesTheKeys(t *testing.T) {
	base := func() Options { return Options{Name: "home", Listen: "127.0.0.1:6222", MaxMsgSize: 25 << 20} }
	cases := []struct {
		name string
		edit func(*Options)
		keys string // the keys the error names, "" for valid
	}{
		{"embedded", func(o *Options) {}, ""},
		{"external", func(o *Options) { o.Listen = ""; o.NATSURL = "nats://a:4222, nats://b:4222" }, ""},
		{"both", func(o *Options) { o.NATSURL = "nats://a:4222" }, "cluster.nats_url, cluster.listen, cluster.routes"},
		{"neither", func(o *Options) { o.Listen = "" }, "cluster.nats_url, cluster.listen"},
		{"routes without listen", func(o *Options) { o.Listen = ""; o.Routes = []string{"nats://b:6222"} }, "cluster.listen, cluster.routes"},
		{"bad name", func(o *Options) { o.Name = "a.b" }, "cluster.name"},
		{"no name: the default", func(o *Options) { o.Name = "" }, ""},
		{"bad order", func(o *Options) { o.Order = "causal" }, "cluster.order"},
		{"bad route", func(o *Options) { o.Routes = []string{"b:6222"} }, "cluster.routes"},
		{"bad listen", func(o *Options) { o.Listen = "6222" }, "cluster.listen"},
		{"token on embedded", func(o *Options) { o.Token = "x" }, "cluster.token"},
		{"two auths", func(o *Options) { o.Listen = ""; o.NATSURL = "nats://a:4222"; o.User = "u"; o.Token = "t" }, "cluster.user, cluster.token, cluster.creds"},
		{"half a certificate", func(o *Options) { o.Listen = ""; o.NATSURL = "nats://a:4222"; o.TLSCert = "c.pem" }, "cluster.tls_cert, cluster.tls_key"},
		{"stream too small", func(o *Options) { o.StreamMaxBytes = 1 << 20 }, "cluster.stream_max_bytes, max_msg_size"},
		{"frame too big for NATS", func(o *Options) { o.MaxMsgSize = 100 << 20 }, "max_msg_size, cluster.listen"},
		{"total inside on 32 bits", func(o *Options) { totalInside = false }, "cluster.order"},
		{"sender inside on 32 bits", func(o *Options) { totalInside = false; o.Order = OrderSender }, ""},
		{"total outside on 32 bits", func(o *Options) { totalInside = false; o.Listen = ""; o.NATSURL = "nats://a:4222" }, ""},
	}
	defer func(was bool) { totalInside = was }(totalInside)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			totalInside = true // a 64-bit system, unless the case says otherwise
			o := base()
			c.edit(&o)
			err := o.Validate()
			if c.keys == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("Validate = %v, want a *KeyError", err)
			}
			if got := strings.Join(ke.Keys, ", "); got != c.keys {
				t.Errorf("keys %q, want %q (error %v)", got, c.keys, err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o := Options{Name: "home", Listen: "0.0.0.0:6222", Routes: []string{"nats://b:6222", "nats://c:6222", "nats://d:6222"}, MaxMsgSize: 50 << 20}.WithDefaults()
	if o.Order != OrderTotal || o.Replicas != 3 || o.StreamMaxBytes != 100<<20 || !strings.HasSuffix(o.NodeName, "-6222") {
		t.Errorf("defaults: order %q replicas %d max bytes %d node %q", o.Order, o.Replicas, o.StreamMaxBytes, o.NodeName)
	}
	if err := (&Options{Name: "home", NodeName: o.NodeName, Listen: "0.0.0.0:6222", Order: OrderSender}).Validate(); err != nil {
		t.Errorf("the default node name %q is not valid: %v", o.NodeName, err)
	}
	x := Options{Name: "home", NATSURL: "nats://a:4222", DefaultPort: 8181}.WithDefaults()
	if x.Replicas != 1 || !strings.HasSuffix(x.NodeName, "-8181") {
		t.Errorf("external defaults: replicas %d node %q", x.Replicas, x.NodeName)
	}
}
