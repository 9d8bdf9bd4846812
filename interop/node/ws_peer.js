'use strict';
// Interop peer on Node's ws library, for the Go tests in interop/. The
// protocol is described in interop/py/peerlib.py.
//
// Usage: node ws_peer.js server [--deflate off|on|w10]
//        node ws_peer.js client --url ws://127.0.0.1:PORT/ [--deflate off|on|w10] [--server-refuses-deflate]
//
// --deflate on: ws's perMessageDeflate defaults (threshold 1024 bytes);
// w10: the server asks for client_max_window_bits=10 and uses
// server_max_window_bits=10; the client asks for server_no_context_takeover and
// server_max_window_bits=10.

const crypto = require('crypto');
const { WebSocket, WebSocketServer } = require('ws');

const FRAGMENT = 64 * 1024;
const BURST = 500; // small messages sent before reading their echoes

function parseArgs(argv) {
  const a = { mode: argv[0], deflate: 'off', url: '', refuses: false, timeout: 40 };
  for (let i = 1; i < argv.length; i++) {
    switch (argv[i]) {
      case '--deflate': a.deflate = argv[++i]; break;
      case '--url': a.url = argv[++i]; break;
      case '--server-refuses-deflate': a.refuses = true; break;
      case '--timeout': a.timeout = Number(argv[++i]); break;
      default: throw new Error('unknown argument ' + argv[i]);
    }
  }
  a.expectDeflate = a.deflate !== 'off' && !a.refuses;
  return a;
}

function emit(kind, obj) { process.stdout.write(kind + ' ' + JSON.stringify(obj) + '\n'); }
function ok(msg) { process.stdout.write('OK ' + msg + '\n'); }
function fail(msg) {
  process.stdout.write('FAIL ' + msg + '\n', () => process.exit(1));
}
function check(cond, msg) { if (!cond) throw new Error(msg); }
function describe(b) { return (Buffer.isBuffer(b) ? 'Buffer[' : 'data[') + b.length + ']'; }

function sendFragmented(ws, data, isBinary, size) {
  for (let i = 0; i < data.length; i += size) {
    ws.send(data.subarray(i, i + size), { binary: isBinary, fin: i + size >= data.length });
  }
}

// ---- payloads ----
const TEXT = 'hello, \u2713 w\u00f6rld \u{1F600}';
const BINARY = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
const fragText = () => Buffer.from('ovbus \u2713 fragment \u00e9 \u65e5\u672c\u8a9e \u{1F600} '.repeat(3000));
const fragBinary = () => crypto.randomBytes(300 * 1024);
function largeBinary(size) {
  const rnd = crypto.randomBytes(size / 2);
  const pat = Buffer.from('ovbus compressible payload 0123456789 '.repeat(size / 64 + 1)).subarray(0, size - rnd.length);
  return Buffer.concat([rnd, pat]);
}
function streamText() {
  const alphabet = Array.from('abcdefghijklmnopqrstuvwxyz \u00fc\u00f1\u00ee\u00e7\u00f8d\u00e9\u65e5\u672c\u2713');
  let s = '';
  while (Buffer.byteLength(s) < 200 * 1024) {
    let chunk = '';
    for (let i = 0; i < 1024; i++) chunk += alphabet[Math.floor(Math.random() * alphabet.length)];
    s += chunk;
  }
  return Buffer.from(s);
}

// ---- server ----
function serve(a) {
  let perMessageDeflate = false;
  if (a.deflate === 'on') perMessageDeflate = true;
  if (a.deflate === 'w10') perMessageDeflate = { serverMaxWindowBits: 10, clientMaxWindowBits: 10 };
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate, maxPayload: 64 << 20 });
  wss.on('listening', () => process.stdout.write('READY ' + wss.address().port + '\n'));
  wss.on('connection', (ws, req) => {
    const path = req.url;
    let last = { data: Buffer.alloc(0), isBinary: false };
    let pongs = 0;
    ws.on('error', (e) => console.error(path, e));
    ws.on('pong', (data) => { if (data.toString() === 'server ping') pongs++; });
    ws.ping('server ping');
    ws.on('message', (data, isBinary) => {
      if (!isBinary && data.subarray(0, 4).toString() === 'cmd:') {
        const cmd = data.toString();
        if (cmd === 'cmd:stream') {
          sendFragmented(ws, last.data, last.isBinary, FRAGMENT);
        } else if (cmd.startsWith('cmd:close ')) {
          const [, code, reason] = cmd.match(/^cmd:close (\d+) (.*)$/s);
          ws.close(Number(code), reason);
        }
        return;
      }
      last = { data, isBinary };
      ws.send(data, { binary: isBinary });
    });
    ws.on('close', (code, reason) => {
      emit('CLOSED', { path, code, reason: reason.toString(), clean: code !== 1006, pongs, extensions: ws.extensions });
    });
  });
}

// ---- client ----
function connect(a, path) {
  let perMessageDeflate = false;
  if (a.deflate === 'on') perMessageDeflate = true;
  if (a.deflate === 'w10') perMessageDeflate = { serverNoContextTakeover: true, serverMaxWindowBits: 10 };
  const ws = new WebSocket(a.url + path, { perMessageDeflate, maxPayload: 64 << 20 });
  const queue = [];
  const waiters = [];
  ws.on('message', (data, isBinary) => {
    const m = { data, isBinary };
    if (waiters.length) waiters.shift()(m); else queue.push(m);
  });
  const pongs = [];
  ws.on('pong', (data) => pongs.push(data.toString()));
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  const next = () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((resolve) => waiters.push(resolve)));
  return new Promise((resolve, reject) => {
    ws.on('error', reject);
    ws.on('open', () => {
      const has = ws.extensions.includes('permessage-deflate');
      if (has !== a.expectDeflate) {
        reject(new Error(`${path}: extensions ${JSON.stringify(ws.extensions)}, deflate wanted: ${a.expectDeflate}`));
      }
      resolve({ ws, next, closed, pongs });
    });
  });
}

async function roundtrip(c, data, isBinary, what, fragment) {
  if (fragment) sendFragmented(c.ws, data, isBinary, fragment);
  else c.ws.send(data, { binary: isBinary });
  const m = await c.next();
  check(m.isBinary === isBinary && Buffer.from(m.data).equals(data),
    `${what}: echo differs: sent ${describe(data)} binary=${isBinary}, got ${describe(m.data)} binary=${m.isBinary}`);
  ok(what);
}

async function client(a) {
  let c = await connect(a, 'a');
  await roundtrip(c, Buffer.from(TEXT), false, 'text');
  await roundtrip(c, BINARY, true, 'binary');
  c.ws.ping('node ping');
  for (let i = 0; c.pongs.length === 0; i++) {
    check(i < 500, 'ping: no pong within 5s');
    await new Promise((r) => setTimeout(r, 10));
  }
  check(c.pongs[0] === 'node ping', `ping: pong payload '${c.pongs[0]}'`);
  ok('ping');
  // OVOS-shaped, over the compression threshold (see peerlib.burst_message).
  const burst = Array.from({ length: BURST }, (_, i) =>
    `{"type": "speak", "data": {"utterance": "burst ${i} \u2713", "expect_response": false}, ` +
    `"context": {"source": ["skills"], "destination": "audio", "session": {"session_id": "default"}}}`);
  for (const m of burst) c.ws.send(m);
  for (const m of burst) {
    const got = await c.next();
    check(!got.isBinary && got.data.toString() === m, `burst: got '${got.data}', want '${m}'`);
  }
  ok('burst');
  // Fragments of 7001 bytes split UTF-8 sequences.
  await roundtrip(c, fragText(), false, 'fragmented text', 7001);
  await roundtrip(c, fragBinary(), true, 'fragmented binary', FRAGMENT);
  await roundtrip(c, largeBinary(4 << 20), true, 'large binary');
  const st = streamText();
  await roundtrip(c, st, false, 'stream text');
  c.ws.send('cmd:stream');
  const m = await c.next();
  check(!m.isBinary && Buffer.from(m.data).equals(st), `streamed message differs: got ${describe(m.data)}`);
  ok('stream from server');
  c.ws.close(4001, 'node bye');
  let cl = await c.closed;
  check(cl.code === 4001 && cl.reason === '', `client close: server answered ${cl.code} '${cl.reason}', want 4001 ''`);
  ok('client close');

  c = await connect(a, 'b');
  c.ws.send('cmd:close 4002 server bye');
  cl = await c.closed;
  check(cl.code === 4002 && cl.reason === 'server bye', `server close: got ${cl.code} '${cl.reason}'`);
  ok('server close');

  // A close frame without a status code: the answer has none either (1005).
  c = await connect(a, 'c');
  await roundtrip(c, Buffer.from(TEXT), false, 'text before an empty close');
  c.ws.close();
  cl = await c.closed;
  check(cl.code === 1005 && cl.reason === '', `empty close: server answered ${cl.code} '${cl.reason}', want 1005 (no status)`);
  ok('empty close');
}

const a = parseArgs(process.argv.slice(2));
process.on('SIGTERM', () => process.exit(0));
if (a.mode === 'server') {
  serve(a);
} else if (a.mode === 'client') {
  const timer = setTimeout(() => fail('timeout after ' + a.timeout + 's'), a.timeout * 1000);
  client(a).then(() => {
    clearTimeout(timer);
    process.stdout.write('PASS\n');
  }, (e) => fail(e && e.stack ? e.stack.split('\n').join(' | ') : String(e)));
} else {
  fail('usage: ws_peer.js server|client ...');
}
