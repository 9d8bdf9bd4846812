"""Shared pieces of the interop peers (see interop/harness_test.go).

Every peer speaks the same little protocol with the Go tests:

Server mode (echo server on 127.0.0.1, port chosen by the OS):
  * prints "READY <port>" on stdout once it listens;
  * echoes every data message with its type, and remembers the last one;
  * the text message "cmd:stream" sends the last message back fragmented
    (FRAGMENT bytes per frame);
  * the text message "cmd:close CODE REASON" closes with CODE and REASON;
  * pings the client when it connects;
  * prints "CLOSED {json}" when a connection ends, with the path, the close
    code and reason received from the client, whether the close was clean,
    and the number of pongs received.

Client mode (against the Go echo server of the tests, which has the same
commands): runs `scenario`-like steps on two connections, /a and /b, prints
"OK ..." lines and exits 0, or prints "FAIL ..." and exits 1.
"""

import json
import os
import random
import sys

FRAGMENT = 64 * 1024
BURST = 500  # small messages sent before reading their echoes


def burst_message(i):
    # An OVOS-shaped message of about 200 bytes: over the compression
    # threshold, so that a server that compresses against a context of its
    # own (RFC 7692 context takeover) sends 500 messages that refer back
    # into each other.
    return ('{"type": "speak", "data": {"utterance": "burst %d \u2713", "expect_response": false}, '
            '"context": {"source": ["skills"], "destination": "audio", "session": {"session_id": "default"}}}' % i)

TEXT = "hello, \u2713 w\u00f6rld \U0001f600"
BINARY = bytes(range(256))


def frag_text():
    # ~100 KB of mixed 1-, 2-, 3- and 4-byte UTF-8 sequences, so that byte
    # fragments split characters across frames.
    return ("ovbus \u2713 fragment \u00e9 \u65e5\u672c\u8a9e \U0001f600 " * 3000)


def frag_binary():
    return random.Random(7).randbytes(300 * 1024)


def large_binary(size=4 << 20):
    # Half incompressible, half compressible.
    rnd = random.Random(11).randbytes(size // 2)
    pat = (b"ovbus compressible payload 0123456789 " * (size // 64 + 1))[: size - len(rnd)]
    return rnd + pat


def stream_text():
    return ("stream \u00fc\u00f1\u00ee\u00e7\u00f8d\u00e9 " * 12000)[: 200 * 1024]


def chunks(data, size):
    return [data[i : i + size] for i in range(0, len(data), size)]


def emit(kind, **fields):
    print(kind, json.dumps(fields), flush=True)


def ready(port):
    print("READY", port, flush=True)


def ok(msg):
    print("OK", msg, flush=True)


def fail(msg):
    print("FAIL", msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def describe(x):
    if isinstance(x, (bytes, bytearray)):
        return "bytes[%d]" % len(x)
    if isinstance(x, str):
        return "str[%d] %r" % (len(x), x[:40])
    return repr(x)


def parse_close_cmd(cmd):
    # "cmd:close CODE REASON"
    _, code, reason = cmd.split(" ", 2)
    return int(code), reason


def args():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--url", help="client mode: base URL ending in /")
    p.add_argument("--deflate", default="off", help="off, on, or a peer-specific variant")
    p.add_argument("--server-refuses-deflate", action="store_true",
                   help="client mode: the server does not accept the deflate offer")
    p.add_argument("--timeout", type=float, default=40.0)
    a = p.parse_args()
    a.expect_deflate = a.deflate != "off" and not a.server_refuses_deflate
    return a
