"""Measure an emulated link: a UDP echo between two nodes, run in their own namespaces.

All namespaces share the machine's CLOCK_MONOTONIC, so besides the round trip the probe also
reports each one-way delay (``ab`` = from node a to node b) and each direction's loss.
Run as a module it is the echo server (``serve``) or the pinger (``ping``); ``measure_link``
starts both through the topology and returns the figures stored in the trial record.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fieldtest.netem.topology import LoopbackTopology, Topology

try:
    from fieldtest.errors import FieldtestError
except ImportError:  # run as a plain script (``_self_command``: -S, stdlib only), where it is not caught

    class FieldtestError(Exception):  # type: ignore[no-redef]  # the stdlib-only script's stand-in
        pass


PROBE = struct.Struct("!IIQ")  # magic, seq, client send time (ns)
ECHO_TAIL = struct.Struct("!QQ")  # server receive time, server send time (ns)
MAGIC = 0x46545052  # "FTPR"
WARMUP_MAGIC = 0x46545057  # "FTPW": not counted by the sink


class ProbeError(FieldtestError, RuntimeError):
    """The probe could not run (a node did not start or answered nonsense)."""


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def serve(port: int) -> None:
    """Echo every probe back with receive/send stamps until stdin closes; then print a summary."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", port))
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    seen: set[int] = set()
    while True:
        ready, _, _ = select.select([sock, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            break
        if sock in ready:
            data, peer = sock.recvfrom(65535)
            rx = time.monotonic_ns()
            if len(data) < PROBE.size or PROBE.unpack_from(data)[0] != MAGIC:
                continue
            seen.add(PROBE.unpack_from(data)[1])
            sock.sendto(data + ECHO_TAIL.pack(rx, time.monotonic_ns()), peer)
    sock.close()
    print(json.dumps({"received": len(seen)}), flush=True)


def ping(target: str, port: int, count: int, interval_s: float, size: int, wait_s: float) -> dict[str, Any]:
    """Send ``count`` probes every ``interval_s`` and collect the echoes; per-probe samples."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((target, port))
    sock.setblocking(False)
    pad = b"\0" * max(0, size - PROBE.size)
    samples: dict[int, dict[str, int]] = {}
    sent_at: list[int] = []
    start = time.monotonic_ns()
    step = int(interval_s * 1e9)
    deadline = None
    while deadline is None or time.monotonic_ns() < deadline:
        if deadline is not None and len(samples) == count:
            break  # every probe is back: no need to wait for stragglers
        now = time.monotonic_ns()
        if len(sent_at) < count and now >= start + len(sent_at) * step:
            tx = time.monotonic_ns()
            try:
                sock.send(PROBE.pack(MAGIC, len(sent_at), tx) + pad)
            except OSError:
                pass  # e.g. ENETUNREACH during an outage: the probe counts as lost
            sent_at.append(tx)
            if len(sent_at) == count:
                deadline = tx + int(wait_s * 1e9)
            continue
        wake = deadline if deadline is not None else start + len(sent_at) * step
        ready, _, _ = select.select([sock], [], [], max(0.0, (wake - time.monotonic_ns()) / 1e9))
        if ready:
            _collect(sock, samples)
    sock.close()
    return {"sent_at_ns": sent_at, "echoes": samples}


def _collect(sock: socket.socket, samples: dict[int, dict[str, int]]) -> None:
    while True:
        try:
            data = sock.recv(65535)
        except (BlockingIOError, ConnectionRefusedError):
            return
        rx = time.monotonic_ns()
        if len(data) < PROBE.size + ECHO_TAIL.size:
            continue
        magic, seq, tx = PROBE.unpack_from(data)
        srv_rx, srv_tx = ECHO_TAIL.unpack_from(data, len(data) - ECHO_TAIL.size)
        if magic == MAGIC and seq not in samples:
            samples[seq] = {"tx": tx, "srv_rx": srv_rx, "srv_tx": srv_tx, "rx": rx}


def summarize(raw: dict[str, Any], server_received: int | None) -> dict[str, Any]:
    """Turn per-probe samples into the link figures of a trial record (ms and fractions)."""
    sent = len(raw["sent_at_ns"])
    echoes = list(raw["echoes"].values())
    rtt = [(e["rx"] - e["tx"]) / 1e6 for e in echoes]
    ab = [(e["srv_rx"] - e["tx"]) / 1e6 for e in echoes]
    ba = [(e["rx"] - e["srv_tx"]) / 1e6 for e in echoes]
    out: dict[str, Any] = {"probe": "udp-echo", "sent": sent, "received": len(echoes)}
    out["loss"] = 1.0 - len(echoes) / sent if sent else float("nan")
    if server_received is not None and sent:
        out["loss_ab"] = 1.0 - server_received / sent
        out["loss_ba"] = 1.0 - len(echoes) / server_received if server_received else float("nan")
    for name, values in (("rtt", rtt), ("owd_ab", ab), ("owd_ba", ba)):
        if values:
            out[f"{name}_median_ms"] = statistics.median(values)
            out[f"{name}_p99_ms"] = percentile(values, 99)
            out[f"{name}_min_ms"] = min(values)
            out[f"{name}_max_ms"] = max(values)
            out[f"{name}_std_ms"] = statistics.pstdev(values)
        else:
            out[f"{name}_median_ms"] = out[f"{name}_p99_ms"] = float("nan")
    out["rtt_mean_ms"] = statistics.fmean(rtt) if rtt else float("nan")
    return out


def _self_command() -> list[str]:
    """Run this file as a plain script: stdlib only, so no package imports slow the start (-S)."""
    return [sys.executable, "-S", os.path.abspath(__file__)]


def _end(proc: subprocess.Popen) -> None:
    """Kill a helper that is still running and close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def measure_link(
    topo: Topology | LoopbackTopology,
    a: str,
    b: str,
    count: int = 100,
    interval_s: float = 0.01,
    size: int = 64,
    wait_s: float = 0.5,
    samples: bool = False,
) -> dict[str, Any]:
    """Probe the path from node ``a`` to node ``b``: RTT median/p99, loss and one-way figures.

    ``topo``: the nodes' network (on loopback every node is this machine).
    With ``samples=True`` the result also holds the raw per-probe timestamps (monotonic ns).
    """
    from fieldtest.netem.forwarder import link_pipes  # in the kit: never run as the plain script

    module = _self_command()
    pipe = subprocess.PIPE
    server = topo.run(b, [*module, "serve", "--port", "0"], stdin=pipe, stdout=pipe, stderr=pipe, text=True)
    try:
        server_in, server_out, server_err = link_pipes(server)
        header = server_out.readline()
        if not header:
            raise ProbeError(f"probe server on {b} did not start: {server_err.read().strip()}")
        port = json.loads(header)["port"]
        argv = [*module, "ping", topo.address(b), str(port), "--count", str(count)]
        argv += ["--interval", str(interval_s), "--size", str(size), "--wait", str(wait_s)]
        client = topo.run(a, argv, stdout=pipe, stderr=pipe, text=True)
        out, err = client.communicate(timeout=count * interval_s + wait_s + 30)
        if client.returncode != 0:
            raise ProbeError(f"probe client on {a} failed: {err.strip()[-300:]}")
        server_in.close()
        summary_line = server_out.readline()
        server.wait(timeout=10)
    finally:
        _end(server)
    raw = json.loads(out)
    raw["echoes"] = {int(k): v for k, v in raw["echoes"].items()}
    received = json.loads(summary_line)["received"] if summary_line else None
    result = summarize(raw, received)
    result.update({"from": a, "to": b, "count": count, "interval_s": interval_s, "size": size})
    if samples:
        result["samples"] = raw
    return result


FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet + IPv4 + UDP headers around a datagram's payload


def sink(port: int, idle_s: float, group: str | None = None) -> None:
    """Count blasted datagrams (sent to this node, or to multicast ``group``); after stdin closes,
    keep draining until idle, then report."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind(("0.0.0.0", port))
    if group is not None:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton(group) + bytes(4))
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    seqs: list[int] = []
    rx_ns: list[int] = []
    size = 0
    watch = [sock, sys.stdin]
    while True:
        ready, _, _ = select.select(watch, [], [], None if sys.stdin in watch else idle_s)
        if not ready:
            break
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            watch = [sock]
        if sock in ready:
            data = sock.recv(65535)
            if len(data) >= PROBE.size and PROBE.unpack_from(data)[0] == MAGIC:
                rx_ns.append(time.monotonic_ns())
                seqs.append(PROBE.unpack_from(data)[1])
                size = len(data)
    sock.close()
    print(json.dumps({"seqs": seqs, "rx_ns": rx_ns, "size": size}), flush=True)


def blast_send(
    target: str, port: int, count: int, size: int, interval_s: float, warmup_s: float = 0.2
) -> dict[str, Any]:
    """Send ``count`` datagrams, paced by busy-waiting (sleep is too coarse below a millisecond)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((target, port))
    pad = b"\0" * max(0, size - PROBE.size)
    # one uncounted datagram first, so ARP is resolved before the burst: an unresolved neighbour
    # queues only ~200 kB and would drop the rest of a burst before it reaches the link
    sock.send(PROBE.pack(WARMUP_MAGIC, 0, time.monotonic_ns()))
    time.sleep(warmup_s)
    start = time.monotonic_ns()
    step = int(interval_s * 1e9)
    errors = 0
    for seq in range(count):
        while time.monotonic_ns() < start + seq * step:
            pass
        try:
            sock.send(PROBE.pack(MAGIC, seq, time.monotonic_ns()) + pad)
        except OSError:
            errors += 1
    sock.close()
    return {"sent": count, "send_errors": errors, "start_ns": start, "end_ns": time.monotonic_ns()}


def loss_runs(sent: int, received: set[int]) -> list[int]:
    """Lengths of the runs of consecutive lost sequence numbers."""
    runs, current = [], 0
    for seq in range(sent):
        if seq in received:
            if current:
                runs.append(current)
            current = 0
        else:
            current += 1
    if current:
        runs.append(current)
    return runs


def udp_blast(
    topo: Topology | LoopbackTopology,
    a: str,
    b: str,
    count: int = 1000,
    size: int = 200,
    interval_s: float = 0.0,
    idle_s: float = 0.5,
    group: str | None = None,
    samples: bool = False,
) -> dict[str, Any]:
    """One-way datagrams from ``a`` to ``b`` (to multicast ``group`` that ``b`` joins, if given):
    delivered fraction, loss bursts, arrival rate. With ``samples=True`` also each datagram's
    arrival (``rx_ns`` by sequence number) and the sender's pacing (``start_ns``, datagram ``seq``
    sent at ``start_ns + seq * interval_s``), all CLOCK_MONOTONIC.

    ``wire_kbit`` is the arrival rate counted in Ethernet frame bits, the unit of a profile's
    ``rate_kbit``; it is only meaningful when the sender outpaces the link.
    """
    from fieldtest.netem.forwarder import link_pipes  # in the kit: never run as the plain script

    module = _self_command()
    pipe = subprocess.PIPE
    joins = ["--group", group] if group else []
    sink_proc = topo.run(
        b, [*module, "sink", "--idle", str(idle_s), *joins], stdin=pipe, stdout=pipe, stderr=pipe, text=True
    )
    try:
        sink_in, sink_out, sink_err = link_pipes(sink_proc)
        header = sink_out.readline()
        if not header:
            raise ProbeError(f"sink on {b} did not start: {sink_err.read().strip()}")
        target = group or topo.address(b)
        argv = [*module, "blast", target, str(json.loads(header)["port"]), "--count", str(count)]
        argv += ["--size", str(size), "--interval", str(interval_s)]
        sender = topo.run(a, argv, stdout=pipe, stderr=pipe, text=True)
        out, err = sender.communicate(timeout=count * interval_s + 30)
        if sender.returncode != 0:
            raise ProbeError(f"blast sender on {a} failed: {err.strip()[-300:]}")
        sink_in.close()
        report = sink_out.read()
        sink_proc.wait(timeout=30)
    finally:
        _end(sink_proc)
    sent_info = json.loads(out)
    got = json.loads(report.strip().splitlines()[-1])
    received = set(got["seqs"])
    runs = loss_runs(count, received)
    result: dict[str, Any] = {
        "sent": count,
        "received": len(received),
        "loss": 1.0 - len(received) / count,
        "loss_runs": len(runs),
        "loss_run_mean": statistics.fmean(runs) if runs else 0.0,
        "send_duration_s": (sent_info["end_ns"] - sent_info["start_ns"]) / 1e9,
    }
    rx = got["rx_ns"]
    if len(rx) >= 2 and rx[-1] > rx[0]:
        span_s = (rx[-1] - rx[0]) / 1e9
        result["wire_kbit"] = (len(rx) - 1) * (got["size"] + FRAME_OVERHEAD) * 8 / span_s / 1000
        result["arrival_span_s"] = span_s
    if samples:
        result["samples"] = {
            "start_ns": sent_info["start_ns"],
            "rx_ns": dict(zip(got["seqs"], got["rx_ns"], strict=True)),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fieldtest.netem.probe", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    srv = sub.add_parser("serve", help="UDP echo server (stops when stdin closes)")
    srv.add_argument("--port", type=int, default=0)
    cli = sub.add_parser("ping", help="send probes, print per-probe samples as JSON")
    cli.add_argument("target")
    cli.add_argument("port", type=int)
    cli.add_argument("--count", type=int, default=100)
    cli.add_argument("--interval", type=float, default=0.01)
    cli.add_argument("--size", type=int, default=64)
    cli.add_argument("--wait", type=float, default=0.5)
    snk = sub.add_parser("sink", help="count datagrams from 'blast' (reports when stdin closes)")
    snk.add_argument("--port", type=int, default=0)
    snk.add_argument("--idle", type=float, default=0.5)
    snk.add_argument("--group", default=None, help="join this multicast group")
    bl = sub.add_parser("blast", help="send numbered datagrams")
    bl.add_argument("target")
    bl.add_argument("port", type=int)
    bl.add_argument("--count", type=int, default=1000)
    bl.add_argument("--size", type=int, default=200)
    bl.add_argument("--interval", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        serve(args.port)
    elif args.cmd == "sink":
        sink(args.port, args.idle, args.group)
    elif args.cmd == "blast":
        print(json.dumps(blast_send(args.target, args.port, args.count, args.size, args.interval)))
    else:
        raw = ping(args.target, args.port, args.count, args.interval, args.size, args.wait)
        print(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
