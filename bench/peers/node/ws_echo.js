'use strict';
// An echo server on Node's ws, written as ws's README "Simple server" example:
// every message goes back to its sender, text as text and binary as binary.
// ws's default maxPayload (100 MiB) accepts the 16 MiB benchmark messages.
//
// Usage: node ws_echo.js [PORT [HOST [ROUTE]]]   (defaults 8181 127.0.0.1 /core)

const { WebSocketServer } = require('ws');

const port = Number(process.argv[2] || 8181);
const host = process.argv[3] || '127.0.0.1';
const path = process.argv[4] || '/core';

const wss = new WebSocketServer({ host, port, path });

wss.on('connection', function connection(ws) {
  ws.on('error', console.error);

  ws.on('message', function message(data, isBinary) {
    ws.send(data, { binary: isBinary });
  });
});

wss.on('listening', () => {
  console.error(`node ws echo listening on ${host}:${port}${path}`);
});

process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
