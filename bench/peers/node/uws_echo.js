'use strict';
// An echo server on uWebSockets.js, written as uWS.js's examples/WebSockets.js:
// every message goes back to its sender, text as text and binary as binary.
// Options and command line: uws_app.js.
//
// Usage: node uws_echo.js [PORT [HOST [ROUTE]]]   (defaults 8181 127.0.0.1 /core)

const { serve } = require('./uws_app.js');

serve('echo', () => ({
  message: (ws, message, isBinary) => {
    ws.send(message, isBinary);
  },
}));
