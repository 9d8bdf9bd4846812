#!/usr/bin/python3
"""A line-oriented WebSocket peer on Python's websocket-client (python3-websocket).

usage: peer.py URL [CA_FILE]

stdout, one event a line:
  OPEN                      connected (handshake done)
  CONNERR <b64 message>     the connection failed; the script exits 1
  TEXT <b64 payload>        a text frame (payload as sent: UTF-8 bytes)
  BINARY <b64 payload>      a binary frame
  CLOSE <code> <b64 reason> a close frame (code 1005 when it had no status)
  DROP <exception name>     the connection ended without a close frame
  SENDERR <exception name>  a send failed
stdin, one command a line:
  TEXT <b64>, BINARY <b64>, QUIT
"""
import base64
import ssl
import struct
import sys
import threading

import websocket

out_lock = threading.Lock()


def emit(*parts):
    with out_lock:
        sys.stdout.write(" ".join(parts) + "\n")
        sys.stdout.flush()


def b64(b):
    return base64.b64encode(b).decode("ascii")


def reader(ws):
    while True:
        try:
            op, frame = ws.recv_data_frame(True)
        except websocket.WebSocketConnectionClosedException as e:
            emit("DROP", type(e).__name__)
            return
        except Exception as e:  # reset, protocol error, ...
            emit("DROP", type(e).__name__)
            return
        if op == websocket.ABNF.OPCODE_CLOSE:
            data = frame.data or b""
            code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
            emit("CLOSE", str(code), b64(data[2:]))
            return
        if op == websocket.ABNF.OPCODE_TEXT:
            emit("TEXT", b64(frame.data))
        elif op == websocket.ABNF.OPCODE_BINARY:
            emit("BINARY", b64(frame.data))
        # pings are answered by recv_data_frame; pongs are ignored


def main():
    url = sys.argv[1]
    sslopt = None
    if len(sys.argv) > 2:
        sslopt = {"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": sys.argv[2]}
    try:
        ws = websocket.create_connection(url, timeout=10, sslopt=sslopt)
    except Exception as e:
        emit("CONNERR", b64(("%s: %s" % (type(e).__name__, e)).encode()))
        sys.exit(1)
    ws.settimeout(None)
    emit("OPEN")
    t = threading.Thread(target=reader, args=(ws,), daemon=True)
    t.start()
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        cmd = parts[0]
        if cmd == "QUIT":
            break
        data = base64.b64decode(parts[1]) if len(parts) > 1 else b""
        op = websocket.ABNF.OPCODE_TEXT if cmd == "TEXT" else websocket.ABNF.OPCODE_BINARY
        try:
            ws.send(data, op)
        except Exception as e:
            emit("SENDERR", type(e).__name__)
    t.join(timeout=0.5)


if __name__ == "__main__":
    main()
