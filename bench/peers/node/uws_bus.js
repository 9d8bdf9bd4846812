'use strict';
// The OVOS message bus on uWebSockets.js (uWS's C++ server, publish/subscribe
// and event loop, driven from Node), written as uWS.js's examples/Broadcast.js:
// every client subscribes to one topic on open and every message it sends is
// published to that topic, text as text and binary as binary. The publish is
// the app's (app.publish), not the socket's (ws.publish skips the sender), so
// the sender gets its own message too, as on the OVOS bus. uWS runs one event
// loop, so every client sees the messages in one order. A new client gets the
// OVOS greeting first. Options and command line: uws_app.js.
//
// Usage: node uws_bus.js [PORT [HOST [ROUTE]]]   (defaults 8181 127.0.0.1 /core)

const { serve } = require('./uws_app.js');

const GREETING =
  '{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}';
const TOPIC = 'bus';

serve('fanout', (app) => ({
  open: (ws) => {
    ws.send(GREETING, false);
    ws.subscribe(TOPIC);
  },
  message: (ws, message, isBinary) => {
    app.publish(TOPIC, message, isBinary);
  },
}));
