#!/usr/bin/env python3
"""The sans-IO round trip of wsproto, for comparison with ws.BenchmarkRoundTrip.

The methodology of wsproto's bench/connection.py: a client and a server
Connection in memory; each iteration the client sends a binary message that
the server parses, then the server sends a text message that the client
parses. Message sizes come from a seeded Gaussian (mean 125 bytes, sigma 75
for "small"; 125 KiB and 75 KiB for "large"), drawn before the clock starts.

Run with Debian's python3-wsproto:
    /usr/bin/python3 bench/wsproto/roundtrip.py --size small --deflate
It prints one line: the size class, deflate on/off, iterations and µs per
iteration (the median of --repeat runs).
"""
import argparse
import random
import statistics
import time

import wsproto
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, TextMessage
from wsproto.extensions import PerMessageDeflate


def pair(deflate):
    cext, sext = [], []
    if deflate:
        c = PerMessageDeflate()
        s = PerMessageDeflate()
        offer = c.offer()
        accepted = s.accept(offer)
        c.finalize(accepted)
        cext, sext = [c], [s]
    return (Connection(ConnectionType.CLIENT, extensions=cext),
            Connection(ConnectionType.SERVER, extensions=sext))


def sizes(mean, sigma, n, seed=0):
    rnd = random.Random(seed)
    return [max(1, int(rnd.gauss(mean, sigma))) for _ in range(n)]


def run(size_class, deflate, iterations):
    mean, sigma = (125, 75) if size_class == "small" else (125 * 1024, 75 * 1024)
    lens = sizes(mean, sigma, iterations)
    payload = bytes(random.Random(1).getrandbits(8) for _ in range(max(lens)))
    text = "x" * max(lens)
    client, server = pair(deflate)
    start = time.perf_counter()
    for n in lens:
        server.receive_data(client.send(BytesMessage(data=payload[:n])))
        for _ in server.events():
            pass
        client.receive_data(server.send(TextMessage(data=text[:n])))
        for _ in client.events():
            pass
    return (time.perf_counter() - start) / iterations * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["small", "large"], default="small")
    ap.add_argument("--deflate", action="store_true")
    ap.add_argument("--iterations", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    n = a.iterations or (20000 if a.size == "small" else 500)
    runs = [run(a.size, a.deflate, n) for _ in range(a.repeat)]
    print(f"wsproto {wsproto.__version__} size={a.size} deflate={a.deflate} "
          f"iterations={n} us_per_iteration={statistics.median(runs):.2f} "
          f"min={min(runs):.2f} max={max(runs):.2f}")


if __name__ == "__main__":
    main()
