#!/usr/bin/python3
"""A bus client that reconnects the way ovos-bus-client's MessageBusClient does.

usage: reconnect.py URL RETRY_SECONDS

ovos-bus-client runs websocket-client's WebSocketApp.run_forever and
reconnects from its on_error handler only: it sleeps, makes a new WebSocketApp
and runs it again. on_close alone (a close frame from the server) ends it.
websocket-client 1.2.3 (Debian's) has no run_forever(reconnect=...), so this
loop is the reconnection, with the same rule: retry only after on_error.

stdout, one event a line:
  OPEN <n>           the n-th connection is open (it then sends
                     {"type": "ovos.session.sync", ...} like the real client)
  MSG <b64>          a message
  SYNCED <n>         its own ovos.session.sync came back: it is in the fan-out
  ERROR <exception>  on_error (the connection dropped or could not be made)
  CLOSE <code>       on_close
  GAVEUP             run_forever returned without an error: no reconnection
When a message of type e2e.ping arrives it answers
{"type": "e2e.pong", "data": {"n": <connection number>, "id": <ping id>}}.
"""
import base64
import json
import sys
import threading
import time

import websocket

lock = threading.Lock()
state = {"opens": 0, "errored": False}


def emit(*parts):
    with lock:
        sys.stdout.write(" ".join(parts) + "\n")
        sys.stdout.flush()


def on_open(ws):
    state["opens"] += 1
    emit("OPEN", str(state["opens"]))
    ws.send(json.dumps({"type": "ovos.session.sync", "data": {"n": state["opens"]},
                        "context": {"session": {"session_id": "default"}}}))


def on_message(ws, message):
    emit("MSG", base64.b64encode(message.encode("utf-8")).decode("ascii"))
    try:
        msg = json.loads(message)
    except ValueError:
        return
    if not isinstance(msg, dict):
        return
    if msg.get("type") == "ovos.session.sync" and msg.get("data", {}).get("n") == state["opens"]:
        emit("SYNCED", str(state["opens"]))
    if msg.get("type") == "e2e.ping":
        ws.send(json.dumps({"type": "e2e.pong",
                            "data": {"n": state["opens"], "id": msg.get("data", {}).get("id")},
                            "context": {}}))


def on_error(ws, error):
    state["errored"] = True
    emit("ERROR", type(error).__name__)


def on_close(ws, *args):
    code = args[0] if args else None
    emit("CLOSE", str(code))


def main():
    url = sys.argv[1]
    retry = float(sys.argv[2])
    while True:
        state["errored"] = False
        app = websocket.WebSocketApp(url, on_open=on_open, on_message=on_message,
                                     on_error=on_error, on_close=on_close)
        app.run_forever()
        if not state["errored"]:
            emit("GAVEUP")
            return
        time.sleep(retry)


if __name__ == "__main__":
    main()
