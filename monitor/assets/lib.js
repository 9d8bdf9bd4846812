// lib.js: the monitor's logic that does not touch the page — type globs,
// row filters, bounded buffers, per-type rates and formatting. app.js draws
// the page with it; the browser tests import it directly.

// matchType reports whether a message type matches a glob in which "*"
// stands for any run of characters (":" and "." included) and every other
// character for itself — the rule of the bus's permission patterns
// (config.MatchType), so a pattern means the same in the monitor as in an
// auth token.
export function matchType(pattern, type) {
  let p = 0, s = 0, star = -1, mark = 0;
  while (s < type.length) {
    if (p < pattern.length && pattern[p] === "*") {
      star = p++;
      mark = s;
    } else if (p < pattern.length && pattern[p] === type[s]) {
      p++;
      s++;
    } else if (star >= 0) {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === "*") p++;
  return p === pattern.length;
}

// parsePatterns splits a filter field into globs: commas or spaces separate.
export function parsePatterns(s) {
  return (s || "").split(/[\s,]+/).filter(Boolean);
}

// makeFilter returns a predicate over rows. include and exclude are glob
// lists on the type (an empty include keeps every type), text is matched
// case-insensitively anywhere in the type, the payload, the source, the
// destination and the session, and session, when set, must equal the row's
// session exactly.
export function makeFilter({ include = "", exclude = "", text = "", session = "" } = {}) {
  const inc = parsePatterns(include), exc = parsePatterns(exclude);
  const needle = text.trim().toLowerCase();
  const sess = session.trim();
  if (!inc.length && !exc.length && !needle && !sess) return () => true;
  return (row) => {
    const type = row.type || "";
    if (inc.length && !inc.some((p) => matchType(p, type))) return false;
    if (exc.some((p) => matchType(p, type))) return false;
    if (sess && row.session !== sess) return false;
    if (needle && !haystack(row).includes(needle)) return false;
    return true;
  };
}

function haystack(row) {
  if (row._hay === undefined) {
    row._hay = [row.type, row.payload, row.preview, row.source, row.destination, row.session]
      .filter(Boolean).join("\n").toLowerCase();
  }
  return row._hay;
}

// Ring is a bounded FIFO: pushing past its capacity drops the oldest items
// and counts them in dropped.
export class Ring {
  constructor(capacity) {
    this.capacity = Math.max(1, capacity | 0);
    this.buf = new Array(this.capacity);
    this.start = 0;
    this.length = 0;
    this.dropped = 0;
  }
  // push appends items and returns how many old ones it dropped.
  push(...items) {
    let dropped = 0;
    for (const it of items) {
      if (this.length === this.capacity) {
        this.buf[this.start] = undefined;
        this.start = (this.start + 1) % this.capacity;
        this.length--;
        dropped++;
      }
      this.buf[(this.start + this.length) % this.capacity] = it;
      this.length++;
    }
    this.dropped += dropped;
    return dropped;
  }
  // items returns the content, oldest first.
  items() {
    const out = new Array(this.length);
    for (let i = 0; i < this.length; i++) out[i] = this.buf[(this.start + i) % this.capacity];
    return out;
  }
  // drain returns the content, oldest first, and empties the ring (dropped
  // stays counted).
  drain() {
    const out = this.items();
    this.buf = new Array(this.capacity);
    this.start = 0;
    this.length = 0;
    return out;
  }
  last() {
    return this.length ? this.buf[(this.start + this.length - 1) % this.capacity] : undefined;
  }
}

// View holds what the message list shows: a bounded ring of rows and, while
// paused, a bounded ring of the rows that arrived meanwhile, which resume
// moves into the view. Every row pushed out of either ring is counted in
// dropped, the number the page reports.
export class View {
  constructor(capacity, pendingCapacity = capacity) {
    this.rows = new Ring(capacity);
    this.pending = new Ring(pendingCapacity);
    this.paused = false;
  }
  get dropped() { return this.rows.dropped + this.pending.dropped; }
  // add takes new rows; it returns the rows that became visible (none while
  // paused).
  add(rows) {
    if (this.paused) {
      this.pending.push(...rows);
      return [];
    }
    this.rows.push(...rows);
    return rows;
  }
  pause() { this.paused = true; }
  // resume returns the rows that arrived while paused, now in the view.
  resume() {
    this.paused = false;
    const rows = this.pending.drain();
    this.rows.push(...rows);
    return rows;
  }
  clear() {
    this.rows = new Ring(this.rows.capacity);
    this.pending = new Ring(this.pending.capacity);
  }
}

// Rates keeps per-second message counts per type for the last `seconds`
// seconds; the server sends exact counts (all the messages the token may
// receive, sampled or not).
export class Rates {
  constructor(seconds = 300) {
    this.seconds = seconds;
    this.buckets = new Map(); // second (unix) -> Map(type -> count)
  }
  add(timeMs, counts) {
    const sec = Math.floor(timeMs / 1000);
    let b = this.buckets.get(sec);
    if (!b) this.buckets.set(sec, (b = new Map()));
    for (const [type, n] of Object.entries(counts)) b.set(type, (b.get(type) || 0) + n);
    for (const s of this.buckets.keys()) {
      if (s <= sec - this.seconds) this.buckets.delete(s);
    }
  }
  // series returns, for the last whole seconds before nowMs (all `seconds`
  // of them, or from the first count on, at least `minSeconds`), the `top`
  // busiest types and "other", each with one count per second (oldest
  // first), and the busiest second's total.
  series(nowMs, top = 6, minSeconds = 60) {
    const end = Math.floor(nowMs / 1000); // the current, unfinished second is left out
    let oldest = end;
    for (const sec of this.buckets.keys()) oldest = Math.min(oldest, sec);
    const span = Math.min(this.seconds, Math.max(minSeconds, end - oldest));
    const first = end - span;
    const totals = new Map();
    for (const [sec, b] of this.buckets) {
      if (sec < first || sec >= end) continue;
      for (const [type, n] of b) totals.set(type, (totals.get(type) || 0) + n);
    }
    const ranked = [...totals.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const shown = ranked.slice(0, top).map(([t]) => t);
    const index = new Map(shown.map((t, i) => [t, i]));
    const lines = shown.map((type) => ({ type, values: new Array(span).fill(0) }));
    const other = { type: "other", values: new Array(span).fill(0) };
    const sum = new Array(span).fill(0);
    for (const [sec, b] of this.buckets) {
      if (sec < first || sec >= end) continue;
      const i = sec - first;
      for (const [type, n] of b) {
        const k = index.get(type);
        (k === undefined ? other : lines[k]).values[i] += n;
        sum[i] += n;
      }
    }
    if (ranked.length > top) lines.push(other);
    return { lines, peak: Math.max(0, ...sum), start: first, seconds: span };
  }
}

// formatSize renders a byte count: 512 B, 1.5 KiB, 3.0 MiB.
export function formatSize(n) {
  if (n < 1024) return n + " B";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1024 / 1024).toFixed(1) + " MiB";
}

// formatDuration renders seconds as 45s, 3m12s, 2h05m.
export function formatDuration(sec) {
  sec = Math.max(0, Math.floor(sec));
  if (sec < 60) return sec + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m" + String(sec % 60).padStart(2, "0") + "s";
  return Math.floor(sec / 3600) + "h" + String(Math.floor(sec / 60) % 60).padStart(2, "0") + "m";
}

// formatTime renders a unix time in ms as HH:MM:SS.mmm, local time.
export function formatTime(ms) {
  const d = new Date(ms);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}

// pretty returns a row's payload for reading: JSON indented by two spaces,
// other text as it is, binary frames as the hex preview the server sent.
export function pretty(row) {
  if (row.kind === "binary") return row.preview || "";
  if (row.kind === "json" && !row.truncated) {
    try {
      return JSON.stringify(JSON.parse(row.payload), null, 2);
    } catch (e) {
      // fall through: show it as it came
    }
  }
  return row.payload || "";
}

// kindLabel is the label shown beside a type for frames that are not JSON
// messages: "binary", "not JSON", or "" for a JSON message.
export function kindLabel(row) {
  if (row.kind === "binary") return "binary";
  if (row.kind === "text") return "not JSON";
  return "";
}

// parseObject parses a form field as a JSON object ("" is {}); it throws an
// Error that says which field is wrong.
export function parseObject(what, s) {
  if (!s.trim()) return {};
  let v;
  try {
    v = JSON.parse(s);
  } catch (e) {
    throw new Error(`${what} is not valid JSON: ${e.message}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) {
    throw new Error(`${what} must be a JSON object, like {"key": "value"}`);
  }
  return v;
}
