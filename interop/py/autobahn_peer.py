"""Interop peer on Autobahn|Python (Debian's python3-autobahn), asyncio
flavour. Protocol: see peerlib.py.

--deflate: off; on (server: accept the first permessage-deflate offer with
PerMessageDeflateOfferAccept; client: PerMessageDeflateOffer() and
PerMessageDeflateResponseAccept); w10 (server: ask the client for
client_max_window_bits=10; client: ask for server_no_context_takeover and
server_max_window_bits=10).
"""

import asyncio
import types
from urllib.parse import urlparse

from autobahn.asyncio.websocket import (WebSocketClientFactory, WebSocketClientProtocol,
                                        WebSocketServerFactory, WebSocketServerProtocol)
from autobahn.websocket.compress import (PerMessageDeflateOffer, PerMessageDeflateOfferAccept,
                                         PerMessageDeflateResponse, PerMessageDeflateResponseAccept)

import peerlib as P

# Autobahn fragments the compressed form of a message: small fragments, so
# that compressed messages are fragmented too.
STREAM_FRAGMENT = 16 * 1024


class EchoServer(WebSocketServerProtocol):
    def onConnect(self, request):
        self.path = request.path
        self.last = (b"", False)
        self.pongs = 0

    def onOpen(self):
        self.sendPing(b"server ping")

    def onPong(self, payload):
        if payload == b"server ping":
            self.pongs += 1

    def onMessage(self, payload, isBinary):
        if not isBinary and payload.startswith(b"cmd:"):
            cmd = payload.decode()
            if cmd == "cmd:stream":
                self.sendMessage(self.last[0], self.last[1], fragmentSize=STREAM_FRAGMENT)
            elif cmd.startswith("cmd:close "):
                code, reason = P.parse_close_cmd(cmd)
                self.sendClose(code, reason)
            return
        self.last = (payload, isBinary)
        self.sendMessage(payload, isBinary)

    def onClose(self, wasClean, code, reason):
        P.emit("CLOSED", path=getattr(self, "path", "?"), code=code, reason=reason or "", clean=wasClean,
               pongs=getattr(self, "pongs", 0))


async def serve(a):
    loop = asyncio.get_running_loop()
    factory = WebSocketServerFactory()
    factory.protocol = EchoServer
    opts = dict(closeHandshakeTimeout=5, openHandshakeTimeout=10)
    if a.deflate != "off":
        def accept(offers):
            for offer in offers:
                if isinstance(offer, PerMessageDeflateOffer):
                    if a.deflate == "w10":
                        return PerMessageDeflateOfferAccept(offer, request_max_window_bits=10)
                    return PerMessageDeflateOfferAccept(offer)
            return None
        opts["perMessageCompressionAccept"] = accept
    factory.setProtocolOptions(**opts)
    server = await loop.create_server(factory, "127.0.0.1", 0)
    P.ready(server.sockets[0].getsockname()[1])
    await asyncio.Future()


class Client(WebSocketClientProtocol):
    def onConnect(self, response):
        self.factory.st.response = response

    def onOpen(self):
        self.factory.st.opened.set_result(self)

    def onMessage(self, payload, isBinary):
        self.factory.st.queue.put_nowait((payload, isBinary))

    def onPong(self, payload):
        self.factory.st.pongs.put_nowait(payload)

    def onClose(self, wasClean, code, reason):
        st = self.factory.st
        if not st.opened.done():
            st.opened.set_exception(RuntimeError("handshake failed: %s %s %s" % (wasClean, code, reason)))
        st.closed.set_result((wasClean, code, reason or ""))


async def connect(a, path):
    loop = asyncio.get_running_loop()
    st = types.SimpleNamespace(opened=loop.create_future(), closed=loop.create_future(),
                               queue=asyncio.Queue(), pongs=asyncio.Queue(), response=None)
    factory = WebSocketClientFactory(a.url + path)
    factory.protocol = Client
    factory.st = st
    opts = dict(closeHandshakeTimeout=5, openHandshakeTimeout=10)
    if a.deflate != "off":
        if a.deflate == "w10":
            offer = PerMessageDeflateOffer(request_no_context_takeover=True, request_max_window_bits=10)
        else:
            offer = PerMessageDeflateOffer()
        opts["perMessageCompressionOffers"] = [offer]

        def accept(response):
            if isinstance(response, PerMessageDeflateResponse):
                return PerMessageDeflateResponseAccept(response)
            return None
        opts["perMessageCompressionAccept"] = accept
    factory.setProtocolOptions(**opts)
    u = urlparse(a.url)
    await loop.create_connection(factory, u.hostname, u.port)
    proto = await st.opened
    P.check(bool(proto.websocket_extensions_in_use) == a.expect_deflate,
            "%s: extensions in use %r, deflate wanted: %s" % (path, proto.websocket_extensions_in_use, a.expect_deflate))
    return proto, st


async def roundtrip(proto, st, payload, isBinary, what, fragmentSize=None):
    proto.sendMessage(payload, isBinary, fragmentSize=fragmentSize)
    got, gotBinary = await st.queue.get()
    P.check(gotBinary == isBinary and got == payload,
            "%s: echo differs: sent %s binary=%s, got %s binary=%s" % (
                what, P.describe(payload), isBinary, P.describe(got), gotBinary))
    P.ok(what)


async def client(a):
    proto, st = await connect(a, "a")
    await roundtrip(proto, st, P.TEXT.encode(), False, "text")
    await roundtrip(proto, st, P.BINARY, True, "binary")
    proto.sendPing(b"autobahn ping")
    got = await asyncio.wait_for(st.pongs.get(), 5)
    P.check(got == b"autobahn ping", "ping: pong payload %r" % got)
    P.ok("ping")
    burst = [P.burst_message(i).encode() for i in range(P.BURST)]
    for m in burst:
        proto.sendMessage(m, False)
    for m in burst:
        got, _ = await st.queue.get()
        P.check(got == m, "burst: got %s, want %r" % (P.describe(got), m))
    P.ok("burst")
    # Fragments of 7001 bytes split UTF-8 sequences (when not compressed).
    await roundtrip(proto, st, P.frag_text().encode(), False, "fragmented text", fragmentSize=7001)
    await roundtrip(proto, st, P.frag_binary(), True, "fragmented binary", fragmentSize=STREAM_FRAGMENT)
    await roundtrip(proto, st, P.large_binary(), True, "large binary")
    stext = P.stream_text().encode()
    await roundtrip(proto, st, stext, False, "stream text")
    proto.sendMessage(b"cmd:stream", False)
    got, gotBinary = await st.queue.get()
    P.check(not gotBinary and got == stext, "streamed message differs: got %s" % P.describe(got))
    P.ok("stream from server")
    proto.sendClose(4001, "autobahn bye")
    clean, code, reason = await st.closed
    P.check(clean and code == 4001 and reason == "",
            "client close: clean=%s, server answered %r %r, want 4001 ''" % (clean, code, reason))
    P.ok("client close")

    proto, st = await connect(a, "b")
    proto.sendMessage(b"cmd:close 4002 server bye", False)
    clean, code, reason = await st.closed
    P.check(clean and code == 4002 and reason == "server bye",
            "server close: clean=%s, got %r %r, want 4002 'server bye'" % (clean, code, reason))
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
