package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/client"
	"github.com/ovbus/ovbus/message"
)

func init() {
	register("listen", "print the messages on the bus as they arrive", runListen)
}

const listenSynopsis = `ovbus listen [flags]

Prints every message on the bus as it arrives, one per line: by default
  HH:MM:SS.mmm  TYPE  DATA  ctx=CONTEXT
and with --json each frame as received (made compact). Frames that are not OVOS messages are shown
too, marked: [not JSON], [no type], [encrypted], [binary] (with --json as {"raw": TEXT} or
{"binary": BASE64} when they are not JSON). With --type, only messages whose type matches one of
the patterns are shown: * matches any run of characters (dots, colons and slashes included), ?
one character, [abc] [a-z] [!a] one of a class; --exclude leaves out the types matching its
patterns. With --reconnect (the default) listen waits for a bus that is not up yet and
re-establishes the connection when it drops. Without --url it reads the bus's address from the
OVOS configuration as ovbus serve does. With --token (or $OVOS_BUS_TOKEN, or without --url a
token of the configuration that may receive every type) it presents a token to a bus with auth;
no token is ever printed. Stop with Ctrl-C.`

// typePatterns is a repeatable --type flag that also takes comma-separated lists.
type typePatterns []string

func (p *typePatterns) String() string { return strings.Join(*p, ",") }

func (p *typePatterns) Set(s string) error {
	for _, pat := range strings.Split(s, ",") {
		if pat = strings.TrimSpace(pat); pat != "" {
			*p = append(*p, pat)
		}
	}
	return nil
}

// compileGlobs returns a matcher for message types, nil when there are no patterns.
func compileGlobs(flagName string, pats []string) (*regexp.Regexp, error) {
	if len(pats) == 0 {
		return nil, nil
	}
	var sb strings.Builder
	sb.WriteString(`^(?:`)
	for i, p := range pats {
		if i > 0 {
			sb.WriteByte('|')
		}
		if err := globToRegexp(&sb, p); err != nil {
			return nil, fmt.Errorf("--%s %q: %v", flagName, p, err)
		}
	}
	sb.WriteString(`)$`)
	return regexp.Compile(sb.String())
}

func globToRegexp(sb *strings.Builder, p string) error {
	for i := 0; i < len(p); {
		switch c := p[i]; c {
		case '*':
			sb.WriteString(`.*`)
			i++
		case '?':
			sb.WriteString(`.`)
			i++
		case '[':
			end := strings.IndexByte(p[i+1:], ']')
			if end == 0 { // "[]...]": a literal ] first in the class
				if e2 := strings.IndexByte(p[i+2:], ']'); e2 >= 0 {
					end = e2 + 1
				} else {
					end = -1
				}
			}
			if end < 0 {
				return errors.New("unterminated [")
			}
			class := p[i+1 : i+1+end]
			sb.WriteByte('[')
			if class[0] == '!' || class[0] == '^' {
				sb.WriteByte('^')
				class = class[1:]
			}
			for _, r := range class {
				if r == '\\' || r == '[' || r == ']' || r == '^' {
					sb.WriteByte('\\')
				}
				sb.WriteRune(r)
			}
			sb.WriteByte(']')
			i += end + 2
		case '\\':
			if i+1 < len(p) {
				i++
			}
			fallthrough
		default:
			r, n := utf8.DecodeRuneInString(p[i:])
			sb.WriteString(regexp.QuoteMeta(string(r)))
			i += n
		}
	}
	return nil
}

// runListen is `ovbus listen`: it runs until SIGINT or SIGTERM (exit 0).
func runListen(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signalContext()
	defer stop()
	return listenCmd(ctx, args, stdout, stderr)
}

func listenCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("listen", listenSynopsis, exitCodesHelp, stderr)
	bf := addBusFlags(fs)
	var types typePatterns
	var excludes typePatterns
	fs.Var(&types, "type", "show only messages whose type matches this glob `PATTERN` (repeatable, or comma-separated)")
	fs.Var(&excludes, "exclude", "leave out messages whose type matches this glob `PATTERN` (repeatable, or comma-separated; after --type)")
	asJSON := fs.Bool("json", false, "print each frame as one line of compact JSON, as received")
	showCtx := fs.Bool("context", true, "show each message's context (pretty layout)")
	count := fs.Int("count", 0, "exit after printing this many messages (0: no limit)")
	reconnect := fs.Bool("reconnect", true, "reconnect when the connection drops (false: exit 3)")
	if code, ok := parseFlagsOnly(fs, args, stdout, stderr, " (use --type to filter)"); !ok {
		return code
	}
	if *count < 0 {
		return usageError(fs, stderr, "--count must not be negative")
	}
	match, err := compileGlobs("type", types)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	exclude, err := compileGlobs("exclude", excludes)
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	var (
		wasConnected atomic.Bool
		errMu        sync.Mutex // stderr is written from the state callback and from here
	)
	logf := func(format string, a ...any) {
		errMu.Lock()
		defer errMu.Unlock()
		fmt.Fprintf(stderr, "ovbus listen: "+format+"\n", a...)
	}
	// A token of the configuration must let every type through: only then may the empty type
	// (bus.MatchType) be received.
	if err := bf.fromConfig(func(p bus.Permissions) bool { return p.CanReceive("") }, logf); err != nil {
		logf("%v", err)
		return exitUsage
	}
	if bf.tokenLabel != "" {
		logf("using the token %s of the configuration's websocket.auth", bf.tokenLabel)
	}
	dopts, err := bf.dialOptions()
	if err != nil {
		return usageError(fs, stderr, "%v", err)
	}
	onState := func(sc client.StateChange) {
		switch sc.State {
		case client.Connected:
			if wasConnected.Swap(true) {
				logf("reconnected to %s", bf.shown())
			} else {
				logf("connected to %s", bf.shown())
			}
		case client.Disconnected:
			switch {
			case wasConnected.Load() && sc.Retry > 0:
				logf("disconnected: %s; retrying in %v", bf.connError(sc.Err, 0), sc.Retry.Round(1e6))
			case sc.Attempt == 1 && sc.Retry > 0: // started before the bus: say it once, then wait quietly
				logf("cannot connect to %s: %s; waiting for the bus (--reconnect)", bf.shown(), bf.connError(sc.Err, 0))
			}
		case client.Closed:
			if sc.Err != nil {
				logf("connection lost: %s", bf.connError(sc.Err, 0))
			}
		}
	}
	c, err := client.New(bf.url, &client.Options{
		Dial:        dopts,
		NoReconnect: !*reconnect,
		QueueSize:   -1,
		OnState:     onState,
	})
	if err != nil {
		return usageError(fs, stderr, "--url: %s", bf.scrub(err.Error()))
	}
	defer c.Close()

	var (
		printed  int
		finished = make(chan int, 1) // exit code from the handler: --count reached, or stdout failed
		line     []byte
	)
	c.OnFrame(func(f client.Frame) {
		if printed < 0 {
			return
		}
		if match != nil && (f.Err != nil || !match.MatchString(f.Message.Type)) {
			return
		}
		if exclude != nil && f.Err == nil && exclude.MatchString(f.Message.Type) {
			return
		}
		if *asJSON {
			line = appendJSONLine(line[:0], f)
		} else {
			line = appendPrettyLine(line[:0], f, *showCtx)
		}
		if _, err := stdout.Write(line); err != nil {
			logf("writing output: %v", err)
			printed = -1
			finished <- 1
			return
		}
		printed++
		if *count > 0 && printed == *count {
			printed = -1
			finished <- exitOK
		}
	})

	if *reconnect {
		// Started before the bus (at boot, or while it restarts): wait for it.
		if err := c.Start(); err != nil {
			logf("%v", err)
			return exitConn
		}
	} else if err := c.Connect(ctx); err != nil {
		if ctx.Err() != nil {
			return exitOK // interrupted while connecting
		}
		logf("cannot connect to %s: %s", bf.shown(), bf.connError(err, 0))
		return exitConn
	}
	select {
	case <-ctx.Done():
		return exitOK
	case code := <-finished:
		return code
	case <-c.Done(): // the connection dropped with --reconnect=false
		return exitConn
	}
}

// appendJSONLine appends the frame as one line of JSON.
func appendJSONLine(dst []byte, f client.Frame) []byte {
	if !f.Binary && json.Valid(f.Data) {
		buf := bytes.NewBuffer(dst)
		json.Compact(buf, f.Data)
		return append(buf.Bytes(), '\n')
	}
	if f.Binary {
		dst = append(dst, `{"binary":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, f.Data)
		return append(dst, "\"}\n"...)
	}
	dst = append(dst, `{"raw":`...)
	b, _ := json.Marshal(strings.ToValidUTF8(string(f.Data), "\uFFFD"))
	dst = append(dst, b...)
	return append(dst, "}\n"...)
}

// appendPrettyLine appends "HH:MM:SS.mmm  type  data  ctx=context".
func appendPrettyLine(dst []byte, f client.Frame, showCtx bool) []byte {
	dst = f.Received.AppendFormat(dst, "15:04:05.000")
	dst = append(dst, "  "...)
	if f.Err == nil {
		var raw struct {
			Data    json.RawMessage `json:"data"`
			Context json.RawMessage `json:"context"`
		}
		json.Unmarshal(f.Data, &raw) // Parse succeeded, so this does too
		dst = append(dst, f.Message.Type...)
		dst = append(dst, "  "...)
		dst = appendCompact(dst, raw.Data)
		if showCtx && len(f.Message.Context) > 0 {
			dst = append(dst, "  ctx="...)
			dst = appendCompact(dst, raw.Context)
		}
		return append(dst, '\n')
	}
	dst = append(dst, '[')
	dst = append(dst, frameKind(f.Err)...)
	dst = append(dst, "]  "...)
	switch {
	case f.Binary:
		const max = 64
		dst = strconv.AppendInt(dst, int64(len(f.Data)), 10)
		dst = append(dst, " bytes  "...)
		dst = hex.AppendEncode(dst, f.Data[:min(len(f.Data), max)])
		if len(f.Data) > max {
			dst = append(dst, "..."...)
		}
	case json.Valid(f.Data):
		dst = appendCompact(dst, f.Data)
	case utf8.Valid(f.Data) && !bytes.ContainsAny(f.Data, "\n\r\t\x00\x1b"):
		dst = append(dst, f.Data...)
	default:
		dst = strconv.AppendQuote(dst, string(f.Data))
	}
	return append(dst, '\n')
}

func appendCompact(dst []byte, raw json.RawMessage) []byte {
	if len(raw) == 0 || string(raw) == "null" {
		return append(dst, "{}"...)
	}
	buf := bytes.NewBuffer(dst)
	if json.Compact(buf, raw) != nil {
		return append(dst, raw...)
	}
	return buf.Bytes()
}

func frameKind(err error) string {
	switch {
	case errors.Is(err, message.ErrBinary):
		return "binary"
	case errors.Is(err, message.ErrEncrypted):
		return "encrypted"
	case errors.Is(err, message.ErrNotJSON):
		return "not JSON"
	case errors.Is(err, message.ErrNotObject):
		return "not an object"
	case errors.Is(err, message.ErrNoType):
		return "no type"
	case errors.Is(err, message.ErrBadField):
		return "bad data or context"
	}
	return "not a message"
}
