package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ovbus/ovbus/bus"
	"github.com/ovbus/ovbus/monitor"
	"github.com/ovbus/ovbus/ws"
)

// The monitor's page (package monitor) in headless Chromium, used as a
// person uses it: every step waits for what the page shows, never for a
// fixed time.

// pageWait bounds one wait for the page; a passing run never reaches it.
const pageWait = 30 * time.Second

// monitorRig is a bus, its monitor and a Chromium tab.
type monitorRig struct {
	t   *testing.T
	bus *bus.Server
	mon *monitor.Monitor
	url string
	tab context.Context
}

func newMonitorRig(t *testing.T, bo bus.Options, mo monitor.Options) *monitorRig {
	t.Helper()
	chrome := chromiumBin(t)
	bo.Addr = "127.0.0.1:0"
	bo.Logger = slog.New(slog.DiscardHandler)
	s, err := bus.New(bo)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	mo.Addr = "127.0.0.1:0" // its own listener, as ovbus serve runs it
	m, err := monitor.New(s, mo)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the pages first, then the bus
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("monitor shutdown: %v", err)
		}
		s.Shutdown(ctx)
	})
	return &monitorRig{t: t, bus: s, mon: m, url: "http://" + m.Addr().String() + "/", tab: startChromium(t, chrome)}
}

// open loads the page in the tab at the given size.
func (r *monitorRig) open(width, height int64) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.tab, pageWait)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, height), chromedp.Navigate(r.url)); err != nil {
		r.t.Fatalf("loading the monitor: %v", err)
	}
}

// eval runs js in the page and returns its value.
func eval[T any](r *monitorRig, js string) T {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.tab, pageWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		r.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

// do runs js in the page for its effect.
func (r *monitorRig) do(js string) {
	r.t.Helper()
	eval[any](r, "(() => {"+js+"})(), true")
}

// wait polls js until it is truthy; what says what the test waits for.
func (r *monitorRig) wait(what, js string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.tab, pageWait+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](js, chromedp.WithPollingTimeout(pageWait))); err != nil {
		state, _ := chromedp.Run(context.WithoutCancel(r.tab), chromedp.Evaluate[string](
			`document.getElementById("status").textContent + " | " + document.getElementById("view-note").textContent + " | rows: " + document.querySelectorAll("#messages tbody tr").length`))
		r.t.Fatalf("waiting for %s (%s): %v; the page says: %s", what, js, err, state)
	}
}

// input sets a field's value as typing does.
func (r *monitorRig) input(id, value string) {
	r.t.Helper()
	r.do(fmt.Sprintf(`const e = document.getElementById(%q); e.value = %q; e.dispatchEvent(new Event("input", {bubbles: true}));`, id, value))
}

func (r *monitorRig) click(selector string) {
	r.t.Helper()
	r.do(fmt.Sprintf(`document.querySelector(%q).click();`, selector))
}

// rowJS finds the list's row of a message type.
func rowJS(typ string) string {
	return fmt.Sprintf(`document.querySelector('#messages tbody tr[data-type=%q]')`, typ)
}

// testClient is a bus client that reads everything (so it is never a slow
// consumer) and remembers the types it saw; respond, when set, may answer.
type testClient struct {
	c       *ws.Conn
	mu      sync.Mutex
	seen    map[string]json.RawMessage // type -> the last data
	changed chan struct{}
	respond func(typ string, data json.RawMessage) string // a frame to send, or ""
}

func dialTestClient(t *testing.T, s *bus.Server, header http.Header, respond func(string, json.RawMessage) string) *testClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pageWait)
	defer cancel()
	c, _, err := ws.Dial(ctx, "ws://"+s.Addr().String()+"/core", &ws.DialOptions{Header: header})
	if err != nil {
		t.Fatalf("dialing the bus: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
	tc := &testClient{c: c, seen: map[string]json.RawMessage{}, changed: make(chan struct{}, 1), respond: respond}
	go func() {
		for {
			_, b, err := c.ReadMessage(context.Background())
			if err != nil {
				return
			}
			var m struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"data"`
			}
			if json.Unmarshal(b, &m) != nil {
				continue
			}
			tc.mu.Lock()
			tc.seen[m.Type] = m.Data
			tc.mu.Unlock()
			select {
			case tc.changed <- struct{}{}:
			default:
			}
			if tc.respond != nil {
				if reply := tc.respond(m.Type, m.Data); reply != "" {
					c.WriteMessage(context.Background(), ws.OpText, []byte(reply))
				}
			}
		}
	}()
	return tc
}

func (tc *testClient) send(t *testing.T, frame string) {
	t.Helper()
	if err := tc.emit(frame); err != nil {
		t.Fatalf("sending to the bus: %v", err)
	}
}

// emit sends a frame; unlike send it may run outside the test's goroutine.
func (tc *testClient) emit(frame string) error {
	ctx, cancel := context.WithTimeout(context.Background(), pageWait)
	defer cancel()
	return tc.c.WriteMessage(ctx, ws.OpText, []byte(frame))
}

// dialSilent connects a client that never reads: once its socket buffers
// are full, the bus's writes to it block and it is closed as a slow
// consumer.
func dialSilent(t *testing.T, s *bus.Server, userAgent string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pageWait)
	defer cancel()
	c, _, err := ws.Dial(ctx, "ws://"+s.Addr().String()+"/core", &ws.DialOptions{Header: http.Header{"User-Agent": {userAgent}}})
	if err != nil {
		t.Fatalf("dialing the bus: %v", err)
	}
	t.Cleanup(func() { c.CloseNow() })
}

// waitSeen waits until the client saw a message of type typ and returns its data.
func (tc *testClient) waitSeen(t *testing.T, typ string) json.RawMessage {
	t.Helper()
	deadline := time.NewTimer(pageWait)
	defer deadline.Stop()
	for {
		tc.mu.Lock()
		d, ok := tc.seen[typ]
		tc.mu.Unlock()
		if ok {
			return d
		}
		select {
		case <-tc.changed:
		case <-deadline.C:
			t.Fatalf("the test client saw no %q in %v", typ, pageWait)
		}
	}
}

// repeat calls f(0), f(1), … every interval on a goroutine of its own until
// the returned stop is called or the test ends.
func repeat(t *testing.T, interval time.Duration, f func(i int)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			f(i)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestMonitorPage: the page loads, its logic module passes its tests,
// messages appear with their fields, filters hide and show them, pause
// holds and resume shows what came, the client list shows the clients and a
// slow consumer's close, and a message sent from the page reaches a client,
// with its response shown.
func TestMonitorPage(t *testing.T) {
	r := newMonitorRig(t, bus.Options{WriteTimeout: time.Second}, monitor.Options{})
	r.open(1280, 900)
	r.wait("the page to connect", `document.getElementById("status").textContent === "live"`)

	// The logic module, in the browser that runs it.
	libTests, err := os.ReadFile("testdata/monitor_lib_test.js")
	if err != nil {
		t.Fatal(err)
	}
	if got := eval[string](r, `import("./lib.js").then((lib) => (`+string(libTests)+`)(lib)).catch((e) => "FAIL: " + e.message)`); got != "PASS" {
		t.Fatalf("lib.js tests in Chromium:\n%s", got)
	}

	// A message from a test client, with its fields.
	alice := dialTestClient(t, r.bus, http.Header{"User-Agent": {"alice/1.0"}, "Origin": {"http://alice.test"}}, nil)
	dialTestClient(t, r.bus, http.Header{"User-Agent": {"bob/2.0"}}, nil)
	alice.send(t, `{"type":"test.hello","data":{"greeting":"hi there"},"context":{"source":"alice","destination":"bob","session":{"session_id":"sess-1"}}}`)
	r.wait("the message in the list", rowJS("test.hello"))
	cells := eval[string](r, `Array.from(`+rowJS("test.hello")+`.cells, (c) => c.textContent).join(" | ")`)
	for _, want := range []string{"test.hello", "alice → bob", "sess-1", " B"} {
		if !strings.Contains(cells, want) {
			t.Errorf("row %q lacks %q", cells, want)
		}
	}
	r.click(`#messages tbody tr[data-type="test.hello"]`)
	r.wait("the message's JSON", `(document.getElementById("detail-json") || {}).textContent?.includes('"greeting": "hi there"')`)

	// Binary and non-JSON frames are labelled.
	ctx, cancel := context.WithTimeout(context.Background(), pageWait)
	defer cancel()
	if err := alice.c.WriteMessage(ctx, ws.OpBinary, []byte{0xde, 0xad, 0xbe, 0xef}); err != nil {
		t.Fatal(err)
	}
	alice.send(t, "plain text, not JSON")
	r.wait("the labels", `(() => { const k = Array.from(document.querySelectorAll("#messages .kind"), (b) => b.textContent); return k.includes("binary") && k.includes("not JSON"); })()`)

	// Filters hide it and show it again.
	r.input("f-exclude", "test.*")
	r.wait("the exclude filter to hide it", `!`+rowJS("test.hello"))
	r.input("f-exclude", "")
	r.wait("it back", rowJS("test.hello"))
	r.input("f-include", "other.* speak")
	r.wait("the include filter to hide it", `!`+rowJS("test.hello"))
	r.input("f-include", "test.h*")
	r.wait("the include filter to show it", rowJS("test.hello"))
	r.input("f-text", "HI THERE")
	r.wait("the text filter to keep it", rowJS("test.hello"))
	r.input("f-session", "sess-2")
	r.wait("the session filter to hide it", `!`+rowJS("test.hello"))
	r.click("#f-reset")
	r.wait("the reset to show it", rowJS("test.hello"))

	// Pause holds what comes; resume shows it.
	r.click("#pause")
	r.wait("paused", `document.getElementById("status").textContent === "paused"`)
	alice.send(t, `{"type":"test.during.pause","data":{},"context":{}}`)
	r.wait("the held message to be counted", `document.getElementById("view-note").textContent.includes("1 new message held")`)
	if eval[bool](r, `!!`+rowJS("test.during.pause")) {
		t.Error("a message arrived in the list while paused")
	}
	r.click("#pause")
	r.wait("resume to show what came", rowJS("test.during.pause"))

	// The clients, and a slow consumer's close with its reason.
	r.click(`.tabs button[data-tab="clients"]`)
	// Each with its identity: the rule that let it in (loopback here).
	r.wait("both clients listed", `(() => { const t = document.getElementById("sessions").textContent; return t.includes("alice/1.0 · http://alice.test") && t.includes("bob/2.0") && t.includes("loopback"); })()`)
	dialSilent(t, r.bus, "slow-reader")
	big := make([]byte, 64<<10) // binary frames: cheap for the page, which sees only a preview
	stopFlood := repeat(t, 4*time.Millisecond, func(int) { r.bus.EmitRaw(ws.OpBinary, big) })
	r.wait("the slow consumer's close", `Array.from(document.querySelectorAll("#closes tbody tr")).some((tr) => tr.textContent.includes("slow_consumer"))`)
	stopFlood()

	// Send from the page: it reaches a client (one that joined after the
	// flood, which a loaded machine might have made the others miss); the
	// response is shown.
	carol := dialTestClient(t, r.bus, http.Header{"User-Agent": {"carol/3.0"}}, func(typ string, data json.RawMessage) string {
		if typ == "test.ask" {
			return `{"type":"test.ask.response","data":{"answer":42},"context":{}}`
		}
		return ""
	})
	r.click(`.tabs button[data-tab="send"]`)
	r.input("s-type", "test.from.page")
	r.input("s-data", `{"n": 5}`)
	r.input("s-context", `{"source": "monitor"}`)
	r.click("#s-go")
	if d := carol.waitSeen(t, "test.from.page"); string(d) != `{"n":5}` {
		t.Errorf("carol got data %s", d)
	}
	r.wait("the page to confirm the send", `document.getElementById("send-result").textContent.includes("Relayed test.from.page")`)
	r.input("s-type", "test.ask")
	r.do(`document.getElementById("s-wait").checked = true;`)
	r.click("#s-go")
	r.wait("the response", `!document.getElementById("send-response").hidden && document.getElementById("send-response").textContent.includes('"answer": 42')`)
	r.do(`document.getElementById("s-data").value = "[1]";`)
	r.click("#s-go")
	r.wait("bad data refused on the page", `document.getElementById("send-result").textContent.includes("data must be a JSON object")`)
}

// TestMonitorAuth: with auth on, the page asks for a token; without one it
// gets no data; a token that may receive gui.* sees those messages only.
func TestMonitorAuth(t *testing.T) {
	r := newMonitorRig(t, bus.Options{Auth: bus.Auth{Required: true, Tokens: map[string]bus.Permissions{
		"gui-secret": {Name: "gui", Receive: []string{"gui.*"}, Emit: []string{"gui.*"}},
	}}}, monitor.Options{})
	c := dialTestClient(t, r.bus, http.Header{"Authorization": {"Bearer gui-secret"}}, nil)
	// Traffic all along: a page without a token must show none of it.
	repeat(t, 20*time.Millisecond, func(int) {
		r.bus.EmitRaw(ws.OpText, []byte(`{"type":"speak","data":{"utterance":"secret"}}`))
	})

	r.open(1024, 768)
	r.wait("the token dialog", `document.getElementById("login").open && document.getElementById("status").dataset.state === "denied"`)
	c.send(t, `{"type":"gui.before","data":{},"context":{}}`)
	c.waitSeen(t, "gui.before") // relayed: a page with access would have it now
	if n := eval[int](r, `document.querySelectorAll("#messages tbody tr").length + Number(document.getElementById("msg-count").textContent)`); n != 0 {
		t.Fatalf("without a token the page shows %d messages", n)
	}

	r.input("login-token", "wrong")
	r.click("#login-go")
	r.wait("the refusal", `document.getElementById("login").open && document.getElementById("login-error").textContent.includes("refused")`)

	r.input("login-token", "gui-secret")
	r.click("#login-go")
	r.wait("the page to connect with the token", `document.getElementById("status").textContent === "live" && document.getElementById("who").textContent.includes("token: gui")`)
	c.send(t, `{"type":"gui.after","data":{},"context":{}}`)
	r.wait("the gui message", rowJS("gui.after"))
	if eval[bool](r, `!!`+rowJS("speak")+` || document.body.textContent.includes("secret")`) {
		t.Error("the page shows a speak message the token may not receive")
	}
	r.click(`.tabs button[data-tab="clients"]`)
	r.wait("the clients note", `!document.getElementById("clients-note").hidden`)
}

// TestMonitorCutAndReconnect: a page whose follower falls behind the bus's
// queue bounds is cut like a slow client, says so, and reconnects.
func TestMonitorCutAndReconnect(t *testing.T) {
	r := newMonitorRig(t, bus.Options{MaxQueueMessages: 2}, monitor.Options{})
	r.open(1024, 768)
	r.wait("the page to connect", `document.getElementById("status").textContent === "live"`)
	stopFlood := repeat(t, time.Millisecond, func(int) {
		for range 100 {
			r.bus.EmitRaw(ws.OpText, []byte(`{"type":"burst","data":{}}`))
		}
	})
	r.wait("the page to say it was cut", `document.getElementById("status").textContent.includes("fell behind the bus and was cut")`)
	stopFlood()
	r.wait("the page to reconnect", `document.getElementById("status").textContent === "live"`)
	r.bus.EmitRaw(ws.OpText, []byte(`{"type":"after.reconnect","data":{}}`))
	r.wait("messages again", rowJS("after.reconnect"))
}

// TestMonitorAtHighRate: at 5 000 messages per second the page stays
// responsive, says it samples, counts everything in the chart, and still
// shows a rare message. With OVBUS_MONITOR_SCREENSHOT=path it runs longer
// with varied traffic and saves a screenshot there (docs/monitor.png).
func TestMonitorAtHighRate(t *testing.T) {
	shot := os.Getenv("OVBUS_MONITOR_SCREENSHOT")
	r := newMonitorRig(t, bus.Options{WriteTimeout: 2 * time.Second}, monitor.Options{})
	clients := []*testClient{
		dialTestClient(t, r.bus, http.Header{"User-Agent": {"ovos-core/0.5 (skills)"}}, nil),
		dialTestClient(t, r.bus, http.Header{"User-Agent": {"ovos-audio/0.4"}}, nil),
		dialTestClient(t, r.bus, http.Header{"User-Agent": {"ovos-gui/1.2"}, "Origin": {"http://localhost:8000"}}, nil),
		dialTestClient(t, r.bus, http.Header{"User-Agent": {"ovos-dinkum-listener/0.3"}}, nil),
	}
	r.open(1400, 900)
	r.wait("the page to connect", `document.getElementById("status").textContent === "live"`)

	// The flood: 5 000 messages per second, in steps of 10 ms.
	repeat(t, 10*time.Millisecond, func(i int) {
		for j := range 50 {
			typ := "ovos.common_play.player.state"
			if j%5 == 0 {
				typ = "mycroft.audio.service.track_info"
			}
			r.bus.EmitRaw(ws.OpText, fmt.Appendf(nil, `{"type":%q,"data":{"state":%d,"position_ms":%d},"context":{"source":"ovos-audio","destination":["ovos-gui"],"session":{"session_id":"default"}}}`, typ, j%3, i*10))
		}
	})
	// A conversation now and then, from the clients.
	repeat(t, 300*time.Millisecond, func(i int) {
		sess := fmt.Sprintf(`{"session_id":"kitchen-%d"}`, i/10)
		clients[3].emit(`{"type":"recognizer_loop:utterance","data":{"utterances":["what time is it"],"lang":"en-US"},"context":{"source":"audio","destination":"skills","session":` + sess + `}}`)
		clients[0].emit(`{"type":"mycroft.skill.handler.start","data":{"name":"TimeSkill.handle_query_time"},"context":{"source":"skills","destination":"audio","session":` + sess + `}}`)
		clients[0].emit(fmt.Sprintf(`{"type":"speak","data":{"utterance":"It is %d:%02d","expect_response":false,"lang":"en-US"},"context":{"source":"skills","destination":"audio","session":%s}}`, 10+i/60%12, i%60, sess))
		if i%3 == 0 {
			clients[2].emit(`{"type":"gui.value.set","data":{"__from":"skill-ovos-date-time","time_string":"10:42"},"context":{"source":"gui"}}`)
		}
	})

	r.wait("the sampling note", `!document.getElementById("sampling").hidden && document.getElementById("sampling").textContent.startsWith("sampling:")`)
	// It gives both caps, names the type the flood is cut from, and says why in its title.
	r.wait("the caps and the cut type in the sampling note", `(() => { const s = document.getElementById("sampling");
		return s.textContent.includes("at most 500/s, 125/s per type") && s.textContent.includes("cut: ovos.common_play.player.state") &&
			s.title.includes("at most 125 a second of any one type"); })()`)
	clients[1].send(t, `{"type":"test.rare","data":{"note":"one in thousands"},"context":{}}`)
	r.wait("the rare message among the flood", rowJS("test.rare"))
	r.wait("the chart's legend to rank the flood first", `document.querySelector("#legend li .t")?.textContent === "ovos.common_play.player.state"`)

	// Responsive: a click is handled and drawn at once, the list stays bounded.
	start := time.Now()
	r.click(`#messages tbody tr[data-type="test.rare"]`)
	r.wait("the detail of the clicked row", `(document.getElementById("detail-json") || {}).textContent?.includes("one in thousands")`)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a click took %v to show under load", d)
	}
	if n := eval[int](r, `document.querySelectorAll("#messages tbody tr").length`); n > 1000 {
		t.Errorf("the list holds %d rows; it should stay at most 1000", n)
	}
	if s := eval[string](r, `document.getElementById("status").textContent`); s != "live" {
		t.Errorf("status under load: %q", s)
	}

	if shot == "" {
		return
	}
	// For the picture: a minute of traffic in the chart, a slow client cut, the clients tab checked.
	dialSilent(t, r.bus, "ovos-phal-plugin/0.1")
	gone := dialTestClient(t, r.bus, http.Header{"User-Agent": {"ovos-cli/0.1"}}, nil)
	gone.c.Close(ws.StatusNormalClosure, "bye")
	r.wait("the slow client's close", `document.getElementById("closes").textContent.includes("slow_consumer")`)
	time.Sleep(60 * time.Second) // only for the screenshot: let the chart fill
	r.input("f-exclude", "ovos.common_play.* mycroft.audio.*")
	r.click(`#messages tbody tr[data-type="speak"]`)
	r.wait("the speak detail", `(document.getElementById("detail-json") || {}).textContent?.includes("utterance")`)
	ctx, cancel := context.WithTimeout(r.tab, pageWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot saved to %s", shot)
}
