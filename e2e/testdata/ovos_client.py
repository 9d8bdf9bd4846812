#!/usr/bin/python3
"""A bus client driven the way ovos-bus-client's MessageBusClient drives websocket-client.

usage: ovos_client.py MYCROFT_CONF RETRY_SECONDS

It reads the "websocket" section of MYCROFT_CONF (host, port, route and ssl,
with ovos-bus-client's defaults 127.0.0.1, 8181, /core, false), builds the URL
as MessageBusClient.build_url does, f"{'wss' if ssl else 'ws'}://{host}:{port}{route}",
and runs websocket-client's WebSocketApp(url, on_open=..., on_close=...,
on_error=..., on_message=...).run_forever() with no header, option or
argument of its own. Like MessageBusClient.on_error it reconnects after an
error only: it waits, RETRY_SECONDS at first and twice as long each time up to
60 (ovos-bus-client starts at 5), makes a new WebSocketApp and runs it again;
run_forever returning after on_close alone (a close frame from the bus) ends
it, as it ends the real client's connection for good. On open it emits
{"type": "ovos.session.sync", ...} as the real client does.

OVBUS_TEST_SOURCE_ADDRESS, when set, makes its TCP connections come from that
local address (such as 127.0.0.2): it stands for the machine the client runs
on, not for anything the client does.

stdin, one command a line:
  SEND <json>          send a message
  FLOOD <n> <json>     send it n times back to back, then say FLOODED <sent>
stdout, one event a line:
  OPEN <n>             the n-th connection is open
  MSG <json>           a message (on one line: json.dumps of what arrived)
  ERROR <name> <status>  on_error: the exception's class and the HTTP status
                       of a refused handshake (0 when there is none)
  CLOSE <code> <reason>  on_close
  RETRY <seconds>      about to wait before reconnecting
  GAVEUP               run_forever returned without an error: no reconnection
  FLOODED <sent>
"""
import json
import os
import socket
import sys
import threading
import time

import websocket
import websocket._http as ws_http

lock = threading.Lock()
state = {"opens": 0, "errored": False, "app": None}


def emit(*parts):
    with lock:
        sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
        sys.stdout.flush()


def bind_source(address):
    """Makes websocket-client's sockets connect from address."""
    class BoundSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.bind((address, 0))

    class SocketModule:
        def __getattr__(self, name):
            return getattr(socket, name)
        socket = BoundSocket

    ws_http.socket = SocketModule()


def build_url(host, port, route, ssl):
    # MessageBusClient.build_url, as ovos-bus-client writes it.
    return f"{'wss' if ssl else 'ws'}://{host}:{port}{route}"


def on_open(ws):
    state["opens"] += 1
    emit("OPEN", state["opens"])
    ws.send(json.dumps({"type": "ovos.session.sync", "data": {},
                        "context": {"session": {"session_id": "default"}}}))


def on_message(ws, message):
    try:
        emit("MSG", json.dumps(json.loads(message)))
    except ValueError:
        emit("MSG", json.dumps(message))


def on_error(ws, error):
    state["errored"] = True
    emit("ERROR", type(error).__name__, getattr(error, "status_code", 0))


def on_close(ws, *args):
    code = args[0] if args else None
    reason = args[1] if len(args) > 1 else ""
    emit("CLOSE", code, reason or "")


def commands():
    for line in sys.stdin:
        cmd, _, rest = line.rstrip("\n").partition(" ")
        app = state["app"]
        try:
            if cmd == "SEND":
                app.send(rest)
            elif cmd == "FLOOD":
                n, _, msg = rest.partition(" ")
                sent = 0
                try:
                    for _ in range(int(n)):
                        app.send(msg)
                        sent += 1
                finally:
                    emit("FLOODED", sent)
        except Exception as e:  # the connection closed under the send
            emit("SENDERR", type(e).__name__)


def main():
    conf_path, retry = sys.argv[1], float(sys.argv[2])
    if os.environ.get("OVBUS_TEST_SOURCE_ADDRESS"):
        bind_source(os.environ["OVBUS_TEST_SOURCE_ADDRESS"])
    with open(conf_path) as f:
        section = json.load(f).get("websocket", {})
    url = build_url(section.get("host", "127.0.0.1"), section.get("port", 8181),
                    section.get("route", "/core"), section.get("ssl", False))
    threading.Thread(target=commands, daemon=True).start()
    while True:
        state["errored"] = False
        state["app"] = websocket.WebSocketApp(url, on_open=on_open, on_close=on_close,
                                              on_error=on_error, on_message=on_message)
        state["app"].run_forever()
        if not state["errored"]:
            emit("GAVEUP")
            return
        emit("RETRY", retry)
        time.sleep(retry)
        retry = min(retry * 2, 60)


if __name__ == "__main__":
    main()
