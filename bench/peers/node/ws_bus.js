'use strict';
// The OVOS message bus on Node's ws, written as ws's README "Server broadcast"
// example: every message a client sends goes to every open client, itself
// included, text as text and binary as binary. Node runs one event loop, so
// every client sees the messages in one order. A new client gets the OVOS
// greeting first.
//
// Usage: node ws_bus.js [PORT [HOST [ROUTE]]]   (defaults 8181 127.0.0.1 /core)

const { WebSocketServer, WebSocket } = require('ws');

const GREETING =
  '{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}';

const port = Number(process.argv[2] || 8181);
const host = process.argv[3] || '127.0.0.1';
const path = process.argv[4] || '/core';

const wss = new WebSocketServer({ host, port, path });

wss.on('connection', function connection(ws) {
  ws.on('error', console.error);
  ws.send(GREETING);

  ws.on('message', function message(data, isBinary) {
    wss.clients.forEach(function each(client) {
      if (client.readyState === WebSocket.OPEN) {
        client.send(data, { binary: isBinary });
      }
    });
  });
});

wss.on('listening', () => {
  console.error(`node ws fanout listening on ${host}:${port}${path}`);
});

process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
