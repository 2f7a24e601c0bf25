"""Zenoh's own round trip, as the eclipse-zenoh Python examples z_ping.py / z_pong.py measure it.

    python benchmarks/zenoh_pingpong.py pong --port 7447            # listens, echoes test/ping -> test/pong
    python benchmarks/zenoh_pingpong.py ping --port 7447 --size 1024 --rate 10 --duration 10

As z_ping: a publisher on ``test/ping`` with congestion control BLOCK and ``express`` on, a
subscriber on ``test/pong``; each ping is one ``put`` of ``size`` bytes and its round trip the time
until the echo comes back. Unlike z_ping, which sends the next ping as soon as the echo is in, the
pings leave at ``rate`` (the perf row's rate), so both sides of the comparison carry the same load.
Both ends are peers on loopback TCP, scouting and shared memory off (as the kit's zenoh-peer). ``ping`` prints one
JSON line: the round trips in ms and how many pings got no echo within 5 s.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time

import zenoh

ECHO_TIMEOUT_S = 5.0


def _session(listen: bool, port: int) -> zenoh.Session:
    endpoint = f"tcp/127.0.0.1:{port}"
    config = {
        "mode": "peer",
        "listen": {"endpoints": [endpoint] if listen else []},
        "connect": {"endpoints": [] if listen else [endpoint]},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        "transport": {"shared_memory": {"enabled": False}},  # as the kit's sessions: payloads over TCP
    }
    return zenoh.open(zenoh.Config.from_json5(json.dumps(config)))


def pong(port: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with _session(True, port) as session:
        pub = session.declare_publisher(
            "test/pong", congestion_control=zenoh.CongestionControl.BLOCK, express=True
        )
        session.declare_subscriber("test/ping", lambda sample: pub.put(sample.payload))
        print("PONG READY", flush=True)
        stop.wait()
    return 0


def ping(port: int, size: int, rate: float, duration: float) -> int:
    echoes: queue.Queue = queue.Queue()
    with _session(False, port) as session:
        session.declare_subscriber("test/pong", lambda sample: echoes.put(time.perf_counter_ns()))
        pub = session.declare_publisher(
            "test/ping", congestion_control=zenoh.CongestionControl.BLOCK, express=True
        )
        data = bytes(size)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # warm up: until the first echo
            pub.put(data)
            try:
                echoes.get(timeout=0.2)
                break
            except queue.Empty:
                continue
        time.sleep(0.5)
        while not echoes.empty():
            echoes.get()
        rtts, lost = [], 0
        period = 1.0 / rate
        start = time.monotonic()
        for i in range(max(1, round(rate * duration))):
            time.sleep(max(0.0, start + i * period - time.monotonic()))
            sent = time.perf_counter_ns()
            pub.put(data)
            try:
                rtts.append((echoes.get(timeout=ECHO_TIMEOUT_S) - sent) / 1e6)
            except queue.Empty:
                lost += 1
        elapsed = time.monotonic() - start
    print(json.dumps({"size": size, "rate": rate, "rtt_ms": rtts, "lost": lost, "elapsed_s": elapsed}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("ping", "pong"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    if args.role == "pong":
        return pong(args.port)
    return ping(args.port, args.size, args.rate, args.duration)


if __name__ == "__main__":
    sys.exit(main())
