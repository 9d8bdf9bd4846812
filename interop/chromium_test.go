package interop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ovbus/ovbus/ws"
)

// chromiumBin finds Chromium: INTEROP_CHROMIUM, /usr/bin/chromium, or
// chromium on PATH.
func chromiumBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("INTEROP_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
		if _, err := os.Stat(bin); err != nil {
			if p, err := exec.LookPath("chromium"); err == nil {
				bin = p
			}
		}
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Chromium not found (%v): install it with `make deps` (apt-get install chromium)", err)
	}
	return bin
}

// browserPage runs the scenario in the browser: text, binary, a 1.5 MiB
// random binary message and a 2.3 MB compressible text (both fragmented by
// Chromium), a message streamed back by the server in fragments, a close
// from the browser (/a) and one from the server (/b). It sets
// window.__result to "PASS" or "FAIL: why".
const browserPage = `<!doctype html>
<meta charset="utf-8">
<title>ovbus ws interop</title>
<script>
"use strict";
const WSURL = %q;
function fail(msg) { throw new Error(msg); }
function open(path, protocols) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(WSURL + path, protocols);
    ws.binaryType = "arraybuffer";
    const queue = [], waiters = [];
    ws.onmessage = (e) => { if (waiters.length) waiters.shift()(e.data); else queue.push(e.data); };
    const closed = new Promise((r) => { ws.onclose = (e) => r({code: e.code, reason: e.reason, clean: e.wasClean}); });
    const next = () => queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiters.push(r));
    ws.onopen = () => resolve({ws, next, closed});
    ws.onerror = () => reject(new Error("WebSocket error on " + path));
  });
}
function same(a, b) {
  if (typeof a === "string" || typeof b === "string") return a === b;
  a = new Uint8Array(a); b = new Uint8Array(b);
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
function size(d) { return typeof d === "string" ? "string of " + d.length : "binary of " + d.byteLength; }
async function roundtrip(c, data, what) {
  c.ws.send(data);
  const got = await c.next();
  if (!same(got, data)) fail(what + ": echo differs: sent " + size(data) + ", got " + size(got));
}
function randomBytes(n) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b.buffer;
}
function randomText(n) {
  const alphabet = Array.from("abcdefghijklmnopqrstuvwxyz \u00fc\u00f1\u00ee\u00e7\u00f8d\u00e9\u65e5\u672c\u2713");
  const parts = [];
  for (let i = 0; i < n; i++) parts.push(alphabet[Math.floor(Math.random() * alphabet.length)]);
  return parts.join("");
}
(async () => {
  const c = await open("a", ["x.unknown", "ovbus.v1"]);
  if (!c.ws.extensions.includes("permessage-deflate")) fail("no permessage-deflate: extensions = " + JSON.stringify(c.ws.extensions));
  if (c.ws.protocol !== "ovbus.v1") fail("subprotocol: " + JSON.stringify(c.ws.protocol));
  await roundtrip(c, "hello, \u2713 w\u00f6rld \u{1F600}", "text");
  await roundtrip(c, new Uint8Array(256).map((_, i) => i).buffer, "binary");
  await roundtrip(c, randomBytes(1536 * 1024), "large random binary");
  await roundtrip(c, "ovbus \u2713 compressible \u65e5\u672c\u8a9e ".repeat(80000), "large compressible text");
  const st = randomText(150000);
  await roundtrip(c, st, "stream text");
  c.ws.send("cmd:stream");
  const got = await c.next();
  if (got !== st) fail("cmd:stream: got " + size(got) + ", want the " + size(st) + " sent");
  c.ws.close(4001, "browser bye");
  let cl = await c.closed;
  if (cl.code !== 4001 || cl.reason !== "" || !cl.clean) fail("browser close: " + JSON.stringify(cl) + ", want a clean 4001");
  const d = await open("b", []);
  if (d.ws.protocol !== "") fail("subprotocol without an offer: " + JSON.stringify(d.ws.protocol));
  d.ws.send("cmd:close 4002 server bye");
  cl = await d.closed;
  if (cl.code !== 4002 || cl.reason !== "server bye" || !cl.clean) fail("server close: " + JSON.stringify(cl) + ", want a clean 4002 'server bye'");
  window.__result = "PASS";
})().catch((e) => { window.__result = "FAIL: " + e.message; });
</script>
`

// TestChromium: headless Chromium's WebSocket against the Go echo server,
// with permessage-deflate (Chromium always offers it, with
// client_max_window_bits).
func TestChromium(t *testing.T) {
	chrome := chromiumBin(t)
	srv := startEchoServer(t, ws.AcceptOptions{EnableCompression: true, Subprotocols: []string{"ovbus.v1"}})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	page := fmt.Sprintf(browserPage, srv.URL)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write([]byte(page))
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })

	bctx := startChromium(t, chrome)
	ctx, cancel := context.WithTimeout(bctx, scenarioTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/")); err != nil {
		t.Fatalf("loading the page in Chromium: %v", err)
	}
	result, err := chromedp.Run(ctx, chromedp.Poll[string](`window.__result`, chromedp.WithPollingTimeout(scenarioTimeout-5*time.Second)))
	if err != nil {
		t.Fatalf("running the page in Chromium: %v", err)
	}
	if result != "PASS" {
		t.Errorf("in Chromium: %s", result)
	}

	res := srv.collect(t, 2)
	a, b := res["/a"], res["/b"]
	if a == nil || b == nil {
		t.Fatalf("connections seen by the Go server: %v, want /a and /b", keys(res))
	}
	for _, r := range res {
		if r.Wire == nil {
			t.Fatalf("%s: the handshake failed: %v", r.Path, r.ReadErr)
		}
	}
	if a.Deflate == nil || b.Deflate == nil {
		t.Errorf("permessage-deflate not negotiated with Chromium (offer %q)", a.Request.Header.Get("Sec-WebSocket-Extensions"))
	}
	if a.Subprotocol != "ovbus.v1" || b.Subprotocol != "" {
		t.Errorf("subprotocols: /a %q, /b %q; want \"ovbus.v1\" and none", a.Subprotocol, b.Subprotocol)
	}
	var ce *ws.CloseError
	if !errors.As(a.ReadErr, &ce) || ce.Code != 4001 || ce.Reason != "browser bye" {
		t.Errorf("/a: read loop ended with %v, want Chromium's close 4001 \"browser bye\"", a.ReadErr)
	}
	in, outStats := a.Wire.in.stats(), a.Wire.out.stats()
	if in.Continuations == 0 {
		t.Errorf("/a: Chromium sent no continuation frame; the large messages should arrive fragmented")
	}
	if in.Compressed == 0 || outStats.Compressed == 0 {
		t.Errorf("/a: compressed frames: from Chromium %d, from the server %d; want both", in.Compressed, outStats.Compressed)
	}
	if outStats.Continuations < 2 {
		t.Errorf("/a: the server sent %d continuation frames for cmd:stream", outStats.Continuations)
	}
	if !b.ServerClose || b.CloseErr != nil || b.Wire.in.stats().Close == nil {
		t.Errorf("/b: server close: done=%v err=%v, Chromium's answer %v", b.ServerClose, b.CloseErr, b.Wire.in.stats().Close)
	}
	t.Logf("offer %q, deflate %+v; /a frames from Chromium %d (%d continuation, %d compressed), to it %d (%d continuation, %d compressed)",
		a.Request.Header.Get("Sec-WebSocket-Extensions"), a.Deflate, in.Frames, in.Continuations, in.Compressed,
		outStats.Frames, outStats.Continuations, outStats.Compressed)
}
