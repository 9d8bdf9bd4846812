#!/usr/bin/python3
"""The OVOS message bus's own design on Tornado: the reference peer.

One IOLoop; a WebSocketHandler that sends the greeting on open, then joins the
client list; on_message writes the message to every client, the sender
included, as ovos-messagebus's MessageBusEventHandler does (without its
per-message JSON parsing, logging and config reads, so this is the fastest the
Tornado design goes). As upstream, a binary message is relayed as a *text*
frame (write_message with binary=False), every Origin is accepted, and the
backlog of a slow client is unbounded.

Run it with Debian's python3-tornado:

    /usr/bin/python3 tornado_bus.py [PORT [HOST]]    (defaults 8181 127.0.0.1)

The route is /core. SIGINT and SIGTERM end it with exit code 0.
"""
import signal
import sys

from tornado import ioloop, web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

GREETING = '{"type":"connected","data":{},"context":{"session":{"session_id":"default"}}}'
ROUTE = "/core"
MAX_MSG_SIZE = 25 * 1024 * 1024  # the OVOS websocket.max_msg_size default, 25 MiB

client_connections = []


class MessageBusEventHandler(WebSocketHandler):
    def open(self):
        self.write_message(GREETING)
        client_connections.append(self)

    def on_message(self, message):
        for client in client_connections:
            try:
                client.write_message(message)
            except WebSocketClosedError:
                pass  # on_close will remove it

    def on_close(self):
        if self in client_connections:
            client_connections.remove(self)

    def check_origin(self, origin):
        return True


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8181
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    application = web.Application(
        [(ROUTE, MessageBusEventHandler)],
        websocket_max_message_size=MAX_MSG_SIZE,
    )
    application.listen(port, host)
    print(f"tornado fanout listening on {host}:{port}{ROUTE}", file=sys.stderr, flush=True)

    def stop(signum, frame):
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
