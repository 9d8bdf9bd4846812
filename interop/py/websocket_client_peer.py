"""Interop peer on websocket-client (Debian's python3-websocket), client mode
only: text, binary, a fragmented text message built from frames, a 1 MiB
binary message, ping/pong and closing both ways. websocket-client has no
permessage-deflate. Protocol: see peerlib.py.
"""

import struct
import sys

import websocket
from websocket import ABNF

import peerlib as P


def connect(a, path):
    # No proxy, whatever the environment says.
    ws = websocket.create_connection(a.url + path, timeout=20, http_proxy_host=None,
                                     http_no_proxy=["127.0.0.1"])
    ext = ws.getheaders().get("sec-websocket-extensions")
    P.check(not ext, "%s: the server chose extensions %r that were not offered" % (path, ext))
    return ws


def expect(ws, opcode, data, what):
    op, got = ws.recv_data()
    P.check(op == opcode and got == data, "%s: got opcode %d %s, want opcode %d %s" % (
        what, op, P.describe(got), opcode, P.describe(data)))
    P.ok(what)


def close_payload(frame):
    if len(frame.data) < 2:
        return 1005, ""
    return struct.unpack("!H", frame.data[:2])[0], frame.data[2:].decode()


def client(a):
    ws = connect(a, "a")
    ws.send(P.TEXT)
    expect(ws, ABNF.OPCODE_TEXT, P.TEXT.encode(), "text")
    ws.send_binary(P.BINARY)
    expect(ws, ABNF.OPCODE_BINARY, P.BINARY, "binary")

    # A text message in frames of 7001 bytes: UTF-8 sequences split across
    # frames.
    data = P.frag_text().encode()
    parts = P.chunks(data, 7001)
    for i, part in enumerate(parts):
        op = ABNF.OPCODE_TEXT if i == 0 else ABNF.OPCODE_CONT
        ws.send_frame(ABNF.create_frame(part, op, fin=int(i == len(parts) - 1)))
    expect(ws, ABNF.OPCODE_TEXT, data, "fragmented text")

    big = P.large_binary(1 << 20)
    ws.send_binary(big)
    expect(ws, ABNF.OPCODE_BINARY, big, "large binary")

    ws.ping(b"ping from websocket-client")
    op, frame = ws.recv_data_frame(True)
    P.check(op == ABNF.OPCODE_PONG and frame.data == b"ping from websocket-client",
            "ping: got opcode %d %r" % (op, frame.data))
    P.ok("ping")

    # Server streams the last message back in fragments.
    ws.send("cmd:stream")
    expect(ws, ABNF.OPCODE_BINARY, big, "stream from server")

    ws.send_close(4001, b"websocket-client bye")
    frame = ws.recv_frame()
    P.check(frame.opcode == ABNF.OPCODE_CLOSE, "client close: got opcode %d" % frame.opcode)
    code, reason = close_payload(frame)
    P.check(code == 4001 and reason == "", "client close: server answered %r %r, want 4001 ''" % (code, reason))
    P.check(ws.sock.recv(1) == b"", "client close: the server did not close the TCP connection")
    ws.shutdown()
    P.ok("client close")

    ws = connect(a, "b")
    ws.send("cmd:close 4002 server bye")
    op, frame = ws.recv_data_frame(True)  # answers the close frame
    P.check(op == ABNF.OPCODE_CLOSE, "server close: got opcode %d" % op)
    code, reason = close_payload(frame)
    P.check(code == 4002 and reason == "server bye", "server close: got %r %r" % (code, reason))
    ws.shutdown()
    P.ok("server close")


def main():
    a = P.args()
    if a.mode != "client":
        P.fail("websocket-client has no server")
    try:
        client(a)
    except SystemExit:
        raise
    except BaseException as e:
        P.fail("%s: %r" % (type(e).__name__, e))
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
