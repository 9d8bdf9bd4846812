// app.js: the monitor page. It speaks the protocol described in
// monitor/doc.go over one WebSocket to the monitor's /ws.
import {
  makeFilter, View, Rates, formatSize, formatDuration, formatTime, pretty, kindLabel, parseObject,
} from "./lib.js";
import { drawChart } from "./chart.js";

const VIEW_ROWS = 2000; // rows kept in the list
const PENDING_ROWS = 5000; // rows kept while paused
const DOM_ROWS = 1000; // rows drawn at once
const TOKEN_KEY = "ovbus.monitor.token";

const $ = (id) => document.getElementById(id);
const st = {
  ws: null,
  hello: null,
  view: new View(VIEW_ROWS, PENDING_ROWS),
  rates: new Rates(300),
  filter: makeFilter(),
  rowOf: new WeakMap(),
  selected: null,
  sessionsSeen: new Set(),
  received: 0, // messages the token may receive, since the page opened (the list may show a sample)
  recent: [], // [{at, total, skipped, cut}] of the last batches, for the sampling note
  nextID: 1,
  sends: new Map(),
  retry: 0,
  timer: 0,
  tab: "messages",
};

// ---- connection ----

function wsURL() {
  const u = new URL("ws", location.href);
  u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  return u.href;
}

function connect() {
  clearTimeout(st.timer);
  setStatus("connecting", "connecting…");
  const ws = new WebSocket(wsURL());
  st.ws = ws;
  let denied = "", ended = null;
  ws.onopen = () => ws.send(JSON.stringify({ t: "hello", token: sessionStorage.getItem(TOKEN_KEY) || "" }));
  ws.onmessage = (e) => {
    let m;
    try {
      m = JSON.parse(e.data);
    } catch (err) {
      return;
    }
    switch (m.t) {
      case "hello": onHello(m); break;
      case "denied": denied = m.error || "refused"; break;
      case "batch": onBatch(m); break;
      case "clients": onClients(m); break;
      case "sent": onSent(m); break;
      case "end": ended = m; break;
    }
  };
  ws.onclose = (e) => {
    if (st.ws !== ws) return;
    st.ws = null;
    for (const id of st.sends.keys()) onSent({ id, ok: false, error: "the connection to the monitor was lost" });
    if (denied) {
      setStatus("denied", "no access — click to enter a token");
      showLogin(denied);
      return;
    }
    let why = `disconnected (${e.code}${e.reason ? " " + e.reason : ""})`;
    if (ended) why = ended.reason === "lagged"
      ? "the monitor fell behind the bus and was cut, like any slow client"
      : ended.error || ended.reason;
    const delay = Math.min(5000, 500 * 2 ** st.retry++);
    setStatus("down", `${why}; reconnecting in ${Math.ceil(delay / 1000)} s…`);
    st.timer = setTimeout(connect, delay);
  };
}

function onHello(m) {
  st.hello = m;
  st.retry = 0;
  setStatus(st.view.paused ? "paused" : "up", st.view.paused ? "paused" : "live");
  const who = [];
  if (m.auth) who.push(`token: ${m.token || "(anonymous)"}`);
  if (m.receive) who.push(`receives ${m.receive.join(", ") || "nothing"}`);
  if (m.emit) who.push(`emits ${m.emit.join(", ") || "nothing"}`);
  $("who").textContent = who.join(" · ");
  $("msg-count").title = `messages relayed since the page opened that it may see. ${samplingRule()}`;
  $("clients-note").hidden = m.clients;
  $("clients-note").textContent = m.clients ? "" : "Only a token with full access sees the clients of the bus.";
  const d = $("login");
  if (d.open) d.close();
}

function setStatus(state, text) {
  const s = $("status");
  s.dataset.state = state;
  s.textContent = text;
}

function showLogin(error) {
  const had = sessionStorage.getItem(TOKEN_KEY);
  $("login-error").textContent = had && error ? `The token was refused: ${error}.` : "";
  const d = $("login");
  if (!d.open) d.showModal();
  $("login-token").focus();
}

// After a refusal the status badge opens the token dialog again (Escape
// closes it).
$("status").addEventListener("click", () => {
  if ($("status").dataset.state === "denied") showLogin("");
});

$("login-form").addEventListener("submit", () => {
  sessionStorage.setItem(TOKEN_KEY, $("login-token").value);
  $("login-token").value = "";
  connect();
});

// ---- messages ----

function onBatch(m) {
  const now = Date.now();
  st.rates.add(now, m.counts || {});
  st.received += m.total;
  // cut: per type, the messages of this batch the list did not get (counted, not shown).
  const cut = {};
  if (m.skipped) {
    Object.assign(cut, m.counts);
    for (const r of m.rows) cut[r.type]--;
  }
  st.recent.push({ at: now, total: m.total, skipped: m.skipped, cut });
  for (const r of m.rows) {
    if (r.session && !st.sessionsSeen.has(r.session) && st.sessionsSeen.size < 500) {
      st.sessionsSeen.add(r.session);
      const o = document.createElement("option");
      o.value = r.session;
      $("sessions-seen").append(o);
    }
  }
  const shown = st.view.add(m.rows);
  drawNew(shown);
  notes();
}

// drawNew puts rows (oldest first) at the top of the list.
function drawNew(rows) {
  const body = $("messages").tBodies[0];
  const frag = document.createDocumentFragment();
  for (let i = rows.length - 1; i >= 0; i--) {
    if (st.filter(rows[i])) frag.append(rowElement(rows[i]));
  }
  body.prepend(frag);
  while (body.rows.length > DOM_ROWS) body.lastElementChild.remove();
  $("empty").hidden = body.rows.length > 0;
}

// redraw draws the newest matching rows of the view again (after a filter
// change or a clear).
function redraw() {
  const body = $("messages").tBodies[0];
  const rows = st.view.rows.items();
  const out = [];
  for (let i = rows.length - 1; i >= 0 && out.length < DOM_ROWS; i--) {
    if (st.filter(rows[i])) out.push(rowElement(rows[i]));
  }
  body.replaceChildren(...out);
  $("empty").hidden = out.length > 0;
  $("empty").textContent = rows.length ? "No message matches the filters." : "Waiting for messages…";
}

function rowElement(r) {
  const tr = document.createElement("tr");
  tr.dataset.seq = r.seq;
  tr.dataset.type = r.type;
  if (st.selected === r) tr.className = "sel";
  const td = (text, cls) => {
    const c = document.createElement("td");
    c.textContent = text;
    if (cls) c.className = cls;
    tr.append(c);
    return c;
  };
  td(formatTime(r.time));
  const ty = td(r.type || (r.kind === "json" ? "(no type)" : ""), "ty");
  const label = kindLabel(r);
  if (label) ty.append(badge(label, "kind"));
  if (r.origin) ty.append(badge(r.origin, "kind origin"));
  td(formatSize(r.size), "num");
  td(r.source || r.destination ? `${r.source || "?"} → ${r.destination || "?"}` : "");
  td(r.session || "");
  st.rowOf.set(tr, r);
  return tr;
}

function badge(text, cls) {
  const b = document.createElement("span");
  b.className = cls;
  b.textContent = text;
  return b;
}

$("messages").tBodies[0].addEventListener("click", (e) => {
  const tr = e.target.closest("tr");
  const r = tr && st.rowOf.get(tr);
  if (!r) return;
  for (const s of tr.parentElement.querySelectorAll("tr.sel")) s.classList.remove("sel");
  tr.classList.add("sel");
  st.selected = r;
  showDetail(r);
});

function showDetail(r) {
  const d = $("detail");
  const h = document.createElement("h3");
  h.textContent = r.type || (r.kind === "binary" ? "binary frame" : r.kind === "text" ? "text frame (not JSON)" : "(no type)");
  const dl = document.createElement("dl");
  const item = (k, v) => {
    if (v === undefined || v === "") return;
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = k;
    dd.textContent = v;
    dl.append(dt, dd);
  };
  item("seq", String(r.seq));
  item("time", new Date(r.time).toISOString());
  item("size", `${formatSize(r.size)} (${r.size} bytes)`);
  item("kind", r.kind);
  item("source", r.source);
  item("destination", r.destination);
  item("session", r.session);
  item("from node", r.origin);
  if (r.truncated) item("shown", `the first ${formatSize(r.kind === "binary" ? r.preview.length / 3 : r.payload.length)} only`);
  const pre = document.createElement("pre");
  pre.id = "detail-json";
  pre.append(...highlight(pretty(r), r.kind === "json" && !r.truncated));
  d.replaceChildren(h, dl, pre);
}

// highlight returns the nodes of JSON text with keys, strings, numbers and
// literals in spans (or one text node when it is not JSON).
function highlight(text, json) {
  if (!json) return [document.createTextNode(text)];
  const re = /("(?:\\.|[^"\\])*")(\s*:)?|\b(true|false|null)\b|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;
  const out = [];
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    const s = document.createElement("span");
    s.className = m[1] ? (m[2] ? "k" : "s") : m[3] ? "b" : "n";
    s.textContent = m[1] || m[0];
    out.push(s);
    if (m[2]) out.push(document.createTextNode(m[2]));
    last = re.lastIndex;
  }
  out.push(document.createTextNode(text.slice(last)));
  return out;
}

function notes() {
  $("msg-count").textContent = st.received;
  const parts = [];
  if (st.view.paused) {
    parts.push(`<span class="warn">Paused</span>: ${st.view.pending.length} new message${st.view.pending.length === 1 ? "" : "s"} held, shown on resume.`);
  }
  if (st.view.dropped) {
    parts.push(`${st.view.dropped} older message${st.view.dropped === 1 ? "" : "s"} dropped from the view (it keeps the newest ${VIEW_ROWS}, and ${PENDING_ROWS} while paused).`);
  }
  $("view-note").innerHTML = parts.join(" ");
  const now = Date.now();
  while (st.recent.length && st.recent[0].at < now - 1000) st.recent.shift();
  let total = 0, skipped = 0;
  const cut = {};
  for (const b of st.recent) {
    total += b.total;
    skipped += b.skipped;
    for (const [t, n] of Object.entries(b.cut)) cut[t] = (cut[t] || 0) + n;
  }
  const s = $("sampling");
  s.hidden = skipped === 0;
  if (!skipped) return;
  const most = Object.entries(cut).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]).slice(0, 2).map(([t]) => t);
  s.textContent = `sampling: ${total - skipped} of ${total} msg/s shown` +
    (st.hello ? ` (at most ${st.hello.rows_per_second}/s, ${st.hello.type_rows_per_second}/s per type` : " (") +
    (most.length ? `; cut: ${most.join(", ")}` : "") + "); the chart counts all";
  s.title = samplingRule();
}

// samplingRule says how the list samples a busy bus, with the caps the monitor announced.
function samplingRule() {
  if (!st.hello) return "";
  return `Under heavy traffic the list shows a sample: at most ${st.hello.rows_per_second} messages a second, ` +
    `and at most ${st.hello.type_rows_per_second} a second of any one type, so that a flood of one type cannot ` +
    "crowd the rare ones out of the list. The counts and the chart include every message.";
}

for (const id of ["f-include", "f-exclude", "f-text", "f-session"]) {
  $(id).addEventListener("input", applyFilter);
}
$("filters").addEventListener("submit", (e) => e.preventDefault());
$("f-reset").addEventListener("click", () => {
  for (const id of ["f-include", "f-exclude", "f-text", "f-session"]) $(id).value = "";
  applyFilter();
});

function applyFilter() {
  st.filter = makeFilter({
    include: $("f-include").value,
    exclude: $("f-exclude").value,
    text: $("f-text").value,
    session: $("f-session").value,
  });
  redraw();
}

$("pause").addEventListener("click", () => {
  const b = $("pause");
  if (st.view.paused) {
    drawNew(st.view.resume());
    b.textContent = "Pause";
    b.setAttribute("aria-pressed", "false");
    if (st.hello && st.ws) setStatus("up", "live");
  } else {
    st.view.pause();
    b.textContent = "Resume";
    b.setAttribute("aria-pressed", "true");
    if (st.hello && st.ws) setStatus("paused", "paused");
  }
  notes();
});

$("clear").addEventListener("click", () => {
  st.view.clear();
  st.selected = null;
  $("detail").replaceChildren(Object.assign(document.createElement("p"), { className: "empty", textContent: "Click a message to see it whole." }));
  redraw();
  notes();
});

// ---- clients ----

function onClients(m) {
  const sessions = m.sessions || [], closes = m.closes || [];
  $("client-count").textContent = sessions.length;
  const now = Date.now();
  const cells = (tr, values) => {
    for (const [v, cls] of values) {
      const td = document.createElement("td");
      td.textContent = v;
      if (cls) td.className = cls;
      tr.append(td);
    }
    return tr;
  };
  const agent = (s) => [s.user_agent, s.origin].filter(Boolean).join(" · ");
  $("sessions").tBodies[0].replaceChildren(...sessions.map((s) => {
    const tr = cells(document.createElement("tr"), [
      [s.id], [s.remote], [agent(s)], [s.identity || ""], [formatDuration((now - s.connected) / 1000)],
      [s.frames_in, "num"], [formatSize(s.bytes_in), "num"], [s.frames_out, "num"], [formatSize(s.bytes_out), "num"],
      [`${s.queued_messages} · ${formatSize(s.queued_bytes)}`, "num"],
    ]);
    tr.dataset.id = s.id;
    tr.title = agent(s);
    return tr;
  }));
  $("closes").tBodies[0].replaceChildren(...closes.map((c) => {
    const s = c.session;
    const tr = cells(document.createElement("tr"), [
      [formatTime(c.closed)], [s.id], [s.remote], [s.identity || ""], [c.reason, "reason"], [c.code || "", "num"],
      [c.detail || ""], [formatDuration((c.closed - s.connected) / 1000)], [s.frames_in, "num"], [s.frames_out, "num"],
    ]);
    tr.dataset.id = s.id;
    tr.querySelector(".reason").dataset.reason = c.reason;
    return tr;
  }));
}

// ---- send ----

$("s-type").addEventListener("input", () => {
  $("s-response").placeholder = ($("s-type").value || "TYPE") + ".response";
});

$("send-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const res = $("send-result");
  const type = $("s-type").value.trim();
  let data, context;
  try {
    data = parseObject("data", $("s-data").value);
    context = parseObject("context", $("s-context").value);
  } catch (err) {
    res.innerHTML = "";
    res.append(badge(err.message, "bad"));
    return;
  }
  if (!st.ws || !st.hello) {
    res.textContent = "Not connected.";
    return;
  }
  const wait = $("s-wait").checked;
  const id = st.nextID++;
  const req = {
    t: "send", id, type, data, context, wait,
    response: $("s-response").value.trim() || type + ".response",
    timeout_ms: Math.round(Number($("s-timeout").value || 5) * 1000),
  };
  st.sends.set(id, req);
  st.ws.send(JSON.stringify(req));
  res.textContent = wait ? `Sent ${type}; waiting for ${req.response}…` : `Sending ${type}…`;
  $("send-response").hidden = true;
});

function onSent(m) {
  const req = st.sends.get(m.id);
  if (!req) return;
  st.sends.delete(m.id);
  const res = $("send-result");
  res.innerHTML = "";
  if (!m.ok) {
    res.append(badge(m.error, "bad"));
    return;
  }
  res.append(badge(`Relayed ${req.type}.`, "ok"));
  if (m.response) {
    res.append(` Response ${m.response.type}:`);
    const pre = $("send-response");
    pre.replaceChildren(...highlight(pretty(m.response), m.response.kind === "json" && !m.response.truncated));
    pre.hidden = false;
  }
}

// ---- tabs, chart ----

for (const b of document.querySelectorAll(".tabs button")) {
  b.addEventListener("click", () => {
    st.tab = b.dataset.tab;
    for (const o of document.querySelectorAll(".tabs button")) o.setAttribute("aria-selected", String(o === b));
    for (const t of document.querySelectorAll(".tab")) t.hidden = t.id !== "tab-" + st.tab;
  });
}

function tick() {
  drawChart($("chart"), st.rates.series(Date.now()), $("legend"));
  notes();
}
setInterval(tick, 1000);
window.addEventListener("resize", tick);
tick();
connect();
