"""Interop peer on Python's websockets library (Debian's python3-websockets,
legacy asyncio API of websockets 10.x). Protocol: see peerlib.py.

--deflate: off (compression=None), on (compression="deflate", the library's
defaults: the server asks for 12-bit windows both ways), w10 (client only:
offers server_max_window_bits=10 and client_max_window_bits=10).
"""

import asyncio
import sys

import websockets
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

import peerlib as P


async def agen(parts):
    for p in parts:
        yield p


async def serve(a):
    async def handler(ws):
        last = None
        # A ping to the client at the start; its pong is checked at the end.
        pong = await ws.ping(b"server ping")
        try:
            async for msg in ws:
                if isinstance(msg, str) and msg.startswith("cmd:"):
                    if msg == "cmd:stream":
                        await ws.send(agen(P.chunks(last, P.FRAGMENT)))
                    elif msg.startswith("cmd:close "):
                        code, reason = P.parse_close_cmd(msg)
                        await ws.close(code, reason)
                    continue
                last = msg
                await ws.send(msg)
        except websockets.ConnectionClosed:
            pass
        await ws.wait_closed()
        P.emit("CLOSED", path=ws.path, code=ws.close_code, reason=ws.close_reason,
               pongs=int(pong.done() and not pong.cancelled()),
               extensions=[type(e).__name__ for e in ws.extensions])

    compression = None if a.deflate == "off" else "deflate"
    async with websockets.serve(handler, "127.0.0.1", 0, compression=compression,
                                max_size=None, ping_interval=None) as server:
        P.ready(server.sockets[0].getsockname()[1])
        await asyncio.Future()


async def connect(a, path):
    kw = dict(max_size=None, ping_interval=None, close_timeout=5)
    if a.deflate == "off":
        kw["compression"] = None
    elif a.deflate == "w10":
        kw["extensions"] = [ClientPerMessageDeflateFactory(
            server_max_window_bits=10, client_max_window_bits=10, compress_settings={"memLevel": 5})]
    ws = await websockets.connect(a.url + path, **kw)
    want = a.expect_deflate
    P.check(bool(ws.extensions) == want, "%s: extensions %r, deflate wanted: %s (response header %r)" % (
        path, ws.extensions, want, ws.response_headers.get("Sec-WebSocket-Extensions")))
    return ws


async def roundtrip(ws, sent, what):
    await ws.send(sent if not isinstance(sent, list) else agen(sent))
    want = sent if not isinstance(sent, list) else sent[0][:0].join(sent)
    got = await ws.recv()
    P.check(type(got) is type(want) and got == want,
            "%s: echo differs: sent %s, got %s" % (what, P.describe(want), P.describe(got)))
    P.ok(what)


async def client(a):
    ws = await connect(a, "a")
    await roundtrip(ws, P.TEXT, "text")
    await roundtrip(ws, P.BINARY, "binary")
    await asyncio.wait_for(await ws.ping(b"py ping"), 5)
    P.ok("ping")
    burst = [P.burst_message(i) for i in range(P.BURST)]
    for m in burst:
        await ws.send(m)
    for m in burst:
        got = await ws.recv()
        P.check(got == m, "burst: got %s, want %r" % (P.describe(got), m))
    P.ok("burst")
    await roundtrip(ws, P.chunks(P.frag_text(), 7001), "fragmented text")
    await roundtrip(ws, P.chunks(P.frag_binary(), P.FRAGMENT), "fragmented binary")
    await roundtrip(ws, P.large_binary(), "large binary")
    st = P.stream_text()
    await roundtrip(ws, st, "stream text")
    await ws.send("cmd:stream")
    got = await ws.recv()
    P.check(got == st, "streamed message differs: got %s" % P.describe(got))
    P.ok("stream from server")
    await ws.close(4001, "websockets bye")
    P.check(ws.close_code == 4001 and ws.close_reason == "",
            "client close: server answered %r %r, want 4001 ''" % (ws.close_code, ws.close_reason))
    P.ok("client close")

    ws = await connect(a, "b")
    await ws.send("cmd:close 4002 server bye")
    try:
        got = await ws.recv()
        P.fail("got a message instead of the close: %s" % P.describe(got))
    except websockets.ConnectionClosed:
        pass  # 4002 is not a "normal" code: websockets raises ConnectionClosedError
    await ws.wait_closed()
    P.check(ws.close_code == 4002 and ws.close_reason == "server bye",
            "server close: got %r %r, want 4002 'server bye'" % (ws.close_code, ws.close_reason))
    P.ok("server close")


def main():
    a = P.args()
    if a.mode == "server":
        asyncio.run(serve(a))
        return
    try:
        asyncio.run(asyncio.wait_for(client(a), a.timeout))
    except SystemExit:
        raise
    except BaseException as e:
        P.fail("%s: %r" % (type(e).__name__, e))
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
