package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/config"
	"github.com/ovbus/ovbus/message"
	"github.com/ovbus/ovbus/ws"
)

func init() {
	register("send", "emit one message on the bus, optionally wait for a reply", runSend)
}

// Exit codes of listen and send.
const (
	exitOK      = 0
	exitTimeout = 1 // send: no echo or reply in time
	exitUsage   = 2 // bad flags or arguments
	exitConn    = 3 // cannot connect, or the connection was lost
	exitRefused = 4 // send: the bus refused the message (not allowed)
)

const exitCodesHelp = `
Exit status: 0 done; 1 timed out; 2 bad usage (flags, JSON) or a configuration that cannot be used;
3 cannot connect or connection lost; 4 (send) not allowed: the bus refused the message.
`

// busFlags are the connection flags shared by listen and send, and what the OVOS configuration
// adds to them when --url is not given.
type busFlags struct {
	url      string
	ca       string
	insecure bool
	token    string
	secrets  []string // the tokens to keep out of everything printed
	// busCert is the certificate file the configuration's bus serves with ssl (ssl_cert or the
	// self-signed pair's), trusted beside the system's roots when --url, --ca and --insecure are
	// not given; "" for none.
	busCert string
	// tokenLabel names the token taken from the configuration (bus.Permissions.Label); "" when
	// the token, if any, came from --token or $OVOS_BUS_TOKEN.
	tokenLabel string
}

func addBusFlags(fs *flag.FlagSet) *busFlags {
	b := &busFlags{}
	fs.StringVar(&b.url, "url", "", "bus `URL`, ws:// or wss://; default: the bus of the OVOS configuration, read as ovbus serve "+
		"reads it (websocket host, port, route and ssl of the mycroft.conf stack, OVOS_BUS_HOST, OVOS_BUS_PORT, OVOS_BUS_ROUTE, "+
		"OVOS_BUS_USE_SSL)")
	fs.StringVar(&b.ca, "ca", "", "`FILE` with the PEM certificate of the CA (or the bus's self-signed one) to trust for wss://")
	fs.BoolVar(&b.insecure, "insecure", false, "wss:// without verifying the bus's certificate")
	// The default is read after parsing, so that the help never shows the variable's value.
	fs.StringVar(&b.token, "token", "", "the bus's auth `TOKEN`, sent as Authorization: Bearer (never printed); empty: "+
		"$OVOS_BUS_TOKEN, else without --url a token of the configuration's websocket.auth that may do what the command needs")
	return b
}

// fromConfig fills what --url leaves unsaid from the OVOS configuration stack, read as ovbus serve
// reads it: the URL (host, port, route; wss:// with ssl), the certificate to trust, and, when
// neither --token nor $OVOS_BUS_TOKEN gives one and the bus requires a token, one of its tokens
// whose permissions fits accepts. A token is never taken for a URL given with --url. A file of
// the stack that cannot be read or parsed is skipped, as serve skips it, with a warning.
func (b *busFlags) fromConfig(fits func(bus.Permissions) bool, warn func(format string, a ...any)) error {
	if b.url != "" {
		return nil
	}
	cfg, prov, err := config.Load(config.LoadOptions{})
	if err != nil {
		return fmt.Errorf("%v (--url names the bus without reading the configuration)", err)
	}
	for _, l := range prov.Broken() {
		warn("warning: %v (skipped, as ovbus serve skips it)", l.Err)
	}
	if cfg.Bus.Port == 0 {
		return fmt.Errorf("the configuration's websocket.port is 0 (any free port, set by %s): give the bus's address with --url",
			prov.Source("port"))
	}
	b.url = cfg.URL()
	if cfg.SSL {
		b.busCert = cfg.SSLCert
		if b.busCert == "" || cfg.SSLKey == "" {
			b.busCert, _, _ = config.CertificatePaths(nil)
		}
	}
	if b.token == "" && os.Getenv("OVOS_BUS_TOKEN") == "" {
		b.token, b.tokenLabel = cfg.ClientToken(fits)
	}
	return nil
}

// dialOptions returns the options of the connection: the User-Agent, TLS (--ca, --insecure, or
// the configuration's certificate) and the token (--token, else $OVOS_BUS_TOKEN, else the
// configuration's).
func (b *busFlags) dialOptions() (*ws.DialOptions, error) {
	if b.token == "" {
		b.token = os.Getenv("OVOS_BUS_TOKEN")
	}
	b.secrets = nil
	if b.token != "" {
		b.secrets = append(b.secrets, b.token)
	}
	if u, err := url.Parse(b.url); err == nil {
		for k, vs := range u.Query() {
			if strings.EqualFold(k, "token") {
				for _, v := range vs {
					if v != "" {
						b.secrets = append(b.secrets, v, url.QueryEscape(v))
					}
				}
			}
		}
	}
	o := &ws.DialOptions{Header: http.Header{"User-Agent": {userAgent()}}}
	if b.token != "" {
		o.Header.Set("Authorization", "Bearer "+b.token)
	}
	switch {
	case b.ca != "" || b.insecure:
		cfg := &tls.Config{InsecureSkipVerify: b.insecure}
		if b.ca != "" {
			pem, err := os.ReadFile(b.ca)
			if err != nil {
				return nil, fmt.Errorf("--ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca: %s: no PEM certificate", b.ca)
			}
			cfg.RootCAs = pool
		}
		o.TLSConfig = cfg
	case b.busCert != "":
		// The bus's own certificate too, when this user may read it, so that a self-signed one
		// is trusted; otherwise the system's roots decide alone.
		if pem, err := os.ReadFile(b.busCert); err == nil {
			if pool, err := x509.SystemCertPool(); err == nil && pool.AppendCertsFromPEM(pem) {
				o.TLSConfig = &tls.Config{RootCAs: pool}
			}
		}
	}
	return o, nil
}

// shown is the bus URL as printed: without its token and password.
func (b *busFlags) shown() string { return b.scrub(b.url) }

// scrub replaces every token (--token, $OVOS_BUS_TOKEN, ?token= of the URL) and the URL's
// password in s with "REDACTED": nothing ovbus prints carries a secret.
func (b *busFlags) scrub(s string) string {
	for _, sec := range b.secrets {
		s = strings.ReplaceAll(s, sec, "REDACTED")
	}
	if u, err := url.Parse(b.url); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			s = strings.ReplaceAll(s, p, "REDACTED")
		}
	}
	return s
}

// connError describes a failed connection for people: the timeout as "timed out after 5s", and
// for wss:// a certificate that is not trusted with the flags that trust it.
func (b *busFlags) connError(err error, timeout time.Duration) string {
	err = unwrapClient(err)
	msg := err.Error()
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)):
		// The dial's context deadline, or the socket deadline it became.
		msg = fmt.Sprintf("timed out after %v", timeout)
	case errors.As(err, &unknown):
		msg += "; to trust the bus's certificate pass --ca FILE with it (a self-signed ovbus or ovos-messagebus " +
			"makes ~/.local/share/OpenVoiceOS/ovos-messagebus/certs/ovos-messagebus.crt), or --insecure to skip the check"
	case errors.As(err, &host), errors.As(err, &invalid):
		msg += "; the certificate does not fit this bus: dial the name it was made for, pass --ca FILE with the " +
			"right one, or --insecure to skip the check"
	}
	return b.scrub(msg)
}

func parseObject(what, s string) (map[string]any, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", what, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: extra text after the JSON value", what)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be a JSON object, like {\"key\": \"value\"}", what)
	}
	return m, nil
}

const sendSynopsis = `ovbus send TYPE [DATA_JSON] [flags]

Emits one message {"type": TYPE, "data": DATA_JSON, "context": --context} on the bus and waits
until the bus relays it back (so it was delivered to every client). With --wait, then waits for a
message of that type (the first one after the echo) and prints it as one line of JSON.
DATA_JSON and --context are JSON objects; DATA_JSON "-" reads the object from standard input.
Without --url it reads the bus's address from the OVOS configuration as ovbus serve does.`

// runSend is `ovbus send`.
func runSend(args []string, stdout, stderr io.Writer) int {
	return sendCmd(context.Background(), args, os.Stdin, stdout, stderr)
}

func sendCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("send", sendSynopsis, exitCodesHelp, stderr)
	bf := addBusFlags(fs)
	ctxJSON := fs.String("context", "{}", "message context, a `JSON` object")
	waitType := fs.String("wait", "", "after the echo, wait for a message of this `TYPE` and print it (e.g. TYPE.response)")
	timeout := fs.Duration("timeout", client.DefaultTimeout, "give up connecting, and waiting for the echo and the reply, after this long")
	pos, err := parseArgs(fs, args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage // the flag package printed the error and the usage
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError(fs, stderr, "want TYPE and at most one DATA_JSON, got %d arguments", len(pos))
	}
	typ := pos[0]
	if typ == "" {
		return usageError(fs, stderr, "TYPE is empty")
	}
	var data map[string]any
	if len(pos) == 2 {
		src := pos[1]
		if src == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				fmt.Fprintf(stderr, "ovbus send: reading standard input: %v\n", err)
				return exitUsage
			}
			src = string(b)
		}
		if data, err = parseObject("DATA_JSON", src); err != nil {
			return usageError(fs, stderr, "%v", err)
		}
	}
	msgCtx, err := parseObject("--context", *ctxJSON)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	if *timeout <= 0 {
		return usageError(fs, stderr, "--timeout must be positive")
	}
	// A token of the configuration must let the message out and its echo (and the reply) in.
	fits := func(p bus.Permissions) bool {
		return p.CanEmit(typ) && p.CanReceive(typ) && (*waitType == "" || p.CanReceive(*waitType))
	}
	warn := func(format string, a ...any) { fmt.Fprintf(stderr, "ovbus send: "+format+"\n", a...) }
	if err := bf.fromConfig(fits, warn); err != nil {
		warn("%v", err)
		return exitUsage
	}
	dopts, err := bf.dialOptions()
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	frame, err := message.Message{Type: typ, Data: data, Context: msgCtx}.MarshalJSON()
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}

	c, err := client.New(bf.url, &client.Options{Dial: dopts, NoReconnect: true, QueueSize: -1})
	if err != nil {
		return usageError(fs, stderr, "--url: %s", bf.scrub(err.Error()))
	}
	defer c.Close()

	// One frame handler sees every frame in order: the first frame equal to ours is the echo, the
	// first message of type --wait other than the echo is the reply.
	// A bus with auth tells the sender of a frame its token may not emit (bus.NotAllowedType).
	var (
		mu       sync.Mutex
		echoed   = make(chan struct{})
		refused  = make(chan struct{})
		replied  = make(chan []byte, 1)
		echoSeen bool
		replySet bool
	)
	c.OnFrame(func(f client.Frame) {
		mu.Lock()
		defer mu.Unlock()
		if !echoSeen && !f.Binary && bytes.Equal(f.Data, frame) {
			echoSeen = true
			close(echoed)
			return
		}
		if !echoSeen && f.Err == nil && f.Message.Type == bus.NotAllowedType && f.Message.Data["msg_type"] == typ {
			echoSeen = true
			close(refused)
			return
		}
		if *waitType != "" && !replySet && f.Err == nil && f.Message.Type == *waitType {
			replySet = true
			replied <- f.Data
		}
	})

	cctx, cancel := context.WithTimeout(ctx, *timeout)
	err = c.Connect(cctx)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "ovbus send: cannot connect to %s: %s\n", bf.shown(), bf.connError(err, *timeout))
		return exitConn
	}
	deadline := time.NewTimer(*timeout)
	defer deadline.Stop()
	if err := c.EmitRaw(ctx, frame); err != nil {
		fmt.Fprintf(stderr, "ovbus send: sending %q: %s\n", typ, bf.scrub(err.Error()))
		return exitConn
	}
	waitFor := func(what string, ch <-chan struct{}) int {
		select {
		case <-ch:
			return -1
		case <-refused:
			fmt.Fprintf(stderr, "ovbus send: %q not allowed: the bus refused it (the token's emit permissions do not include it)\n", typ)
			return exitRefused
		case <-deadline.C:
			fmt.Fprintf(stderr, "ovbus send: timed out after %v waiting for %s\n", *timeout, what)
			return exitTimeout
		case <-c.Done():
			fmt.Fprintf(stderr, "ovbus send: connection to %s lost while waiting for %s\n", bf.shown(), what)
			return exitConn
		case <-ctx.Done():
			fmt.Fprintf(stderr, "ovbus send: interrupted while waiting for %s\n", what)
			return exitTimeout
		}
	}
	if code := waitFor(fmt.Sprintf("the bus to relay %q", typ), echoed); code >= 0 {
		return code
	}
	if *waitType == "" {
		return exitOK
	}
	gotReply := make(chan struct{})
	var reply []byte
	go func() {
		select {
		case reply = <-replied:
			close(gotReply)
		case <-c.Done():
		}
	}()
	if code := waitFor(fmt.Sprintf("%q", *waitType), gotReply); code >= 0 {
		return code
	}
	var out bytes.Buffer
	if json.Compact(&out, reply) != nil {
		out.Reset()
		out.Write(reply)
	}
	out.WriteByte('\n')
	if _, err := stdout.Write(out.Bytes()); err != nil {
		fmt.Fprintf(stderr, "ovbus send: %v\n", err)
		return exitConn
	}
	return exitOK
}

// unwrapClient drops the "client: connect: " prefix for a shorter message.
func unwrapClient(err error) error {
	if u := errors.Unwrap(err); u != nil && strings.HasPrefix(err.Error(), "client: connect: ") {
		return u
	}
	return err
}
