'use strict';
// What uws_bus.js and uws_echo.js share: the command line, the WebSocket
// options every uWebSockets.js peer uses, a 404 on every other path, listen,
// and exit on SIGTERM/SIGINT.
//
// Options: maxPayloadLength 32 MiB accepts the 16 MiB echo messages and the
// OVOS bus's 25 MiB max_msg_size. maxBackpressure: uWS skips (drops) a send or
// publish to a client that has more than this many bytes waiting to be
// written; its default, 64 KiB, would drop most of a benchmark burst. The Go
// peers queue up to 4096 messages per client and ovbus by default 100 000
// messages or 64 MiB, so 1 GiB here means "never drop in a benchmark".
// idleTimeout 0: no timeout, as on the other peers (an idle-connection run
// lasts longer than uWS's default of 120 s). No compression.
//
// Usage of a peer: node uws_bus.js|uws_echo.js [PORT [HOST [ROUTE]]]
// (defaults 8181 127.0.0.1 /core)

const uWS = require('uwebsockets');

// serve starts an App whose route (argv[4]) has the given handlers and
// returns it; kind names the peer in its log lines.
function serve(kind, handlers) {
  const port = Number(process.argv[2] || 8181);
  const host = process.argv[3] || '127.0.0.1';
  const path = process.argv[4] || '/core';

  const app = uWS.App();
  app
    .ws(path, {
      compression: uWS.DISABLED,
      maxPayloadLength: 32 * 1024 * 1024,
      maxBackpressure: 1024 * 1024 * 1024,
      closeOnBackpressureLimit: false,
      idleTimeout: 0,
      ...handlers(app),
    })
    .any('/*', (res) => {
      res.writeStatus('404 Not Found').end('404 page not found\n');
    })
    .listen(host, port, (token) => {
      if (!token) {
        console.error(`uws ${kind}: cannot listen on ${host}:${port}`);
        process.exit(1);
      }
      console.error(`uws ${kind} listening on ${host}:${port}${path}`);
    });

  process.on('SIGTERM', () => process.exit(0));
  process.on('SIGINT', () => process.exit(0));
  return app;
}

module.exports = { serve };
