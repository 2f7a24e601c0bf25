"""What the two zenoh-bridge-ros2dds bridges add: one-way latency and CPU against the direct paths.

    .venv/bin/python benchmarks/bench_zenoh_bridge.py                 # about 2 minutes
    .venv/bin/python benchmarks/bench_zenoh_bridge.py --repeat 5 --json out.json

Paths, measured in the same run, interleaved round by round so they share the machine's conditions:

    dds                   kit DDS host -> kit DDS robot (one domain, loopback)
    zenoh-peer direct     kit Zenoh session host -> robot session (what the bridge would carry)
    zenoh-peer bridged    host DDS -> bridge -> Zenoh peer link -> bridge -> robot DDS
    zenoh-router bridged  host DDS -> bridge -> zenohd router -> bridge -> robot DDS

Sender and receiver live in this process (one clock): a TwistStamped carries its send time
(time.time_ns() before serialization) and the receiver's callback takes the difference. CPU: the
bridges' and router's own CPU time during the measured window (psutil), as % of one core. A script,
not a test: it prints figures beside their reference and the machine conditions and never fails on
a slow figure. Needs the bridge built (tools/install_zenoh_bridge.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
from bench_twin import Load, load_conditions, loads_text, measured_load

from fieldtest import rosmsg
from fieldtest.middleware.registry import open_transport
from fieldtest.middleware.zenoh.bridge import BridgeMissingError, find_bridge
from fieldtest.middleware.zenoh.lab import run_trial_bridges, twin_side_launches
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.procs import free_port
from fieldtest.record import CMD_VEL_TOPIC
from fieldtest.record.reference import (
    ZenohBridgeRow,
    ZenohBridgeSummary,
    machine_text,
    utc_now,
    write_reference,
)
from fieldtest.record.trial import software_versions
from fieldtest.testkit.docblocks import zenoh_bridge_table
from fieldtest.transport import TransportConfig

PATHS = ("dds", "zenoh-peer direct", "zenoh-peer bridged", "zenoh-router bridged")
# Measured when the bridge was first built here: the bridges added about 0.4-0.65 ms at
# the minimum and 1.2-2.5 ms at the median over direct DDS on a busy machine; p50 0.79 ms one-way
# DDS -> bridge -> Zenoh peer -> bridge -> DDS.
REFERENCE = "first measured here: bridges add ~0.4-0.65 ms (min) and ~1.2-2.5 ms (median) over direct DDS"
WARMUP_S = 20.0


@dataclass
class PathRun:
    path: str
    latencies_ms: list[float] = field(default_factory=list)
    bridge_cpu_percent: float = 0.0  # bridges + router, % of one core over the window
    own_cpu_percent: float = 0.0  # this process (the kit's endpoints), % of one core
    loads: list[Load] = field(default_factory=list)
    sent: int = 0


def _transport(path: str, domain_id: int) -> TransportConfig:
    middleware = "dds" if path == "dds" else path.split()[0]
    zenoh_path = "bridge" if path.endswith("bridged") else "direct"
    return TransportConfig(
        middleware=middleware,
        zenoh_path=zenoh_path,
        domain_id=domain_id,
        namespace=f"/b{random.randrange(16**6):06x}",
        zenoh_port=free_port(),
    )


@contextlib.contextmanager
def _bridges(transport: TransportConfig, workdir: Path) -> Iterator[list[psutil.Process]]:
    if transport.middleware == "dds" or transport.settings(ZenohSettings).path == "direct":
        yield []
        return
    host, robot = twin_side_launches(transport, "twist_stamped")
    os.environ["ROS_DISTRO"] = host.ros_distro  # the kit's GID size must match the bridges'
    with run_trial_bridges(host, robot, workdir / transport.namespace.strip("/")) as running:
        yield [psutil.Process(p.pid) for p in running.values()]


def _cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def measure(path: str, count: int, rate_hz: float, workdir: Path, domain_id: int, run: PathRun) -> None:
    transport = _transport(path, domain_id)
    with _bridges(transport, workdir) as bridge_procs:
        robot = open_transport(transport, "robot")
        host = open_transport(transport, "host")
        got: dict[int, float] = {}
        lock = threading.Lock()

        def on_cmd(msg) -> None:
            now = time.time_ns()
            with lock:
                got.setdefault(
                    rosmsg.seq_of(msg.header.frame_id), (now - rosmsg.ns_of(msg.header.stamp)) / 1e6
                )

        try:
            robot.subscribe(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, on_cmd)
            send = host.publisher(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED)
            deadline = time.monotonic() + WARMUP_S
            while not got and time.monotonic() < deadline:
                send(rosmsg.command(0, time.time_ns(), 0.0, 0.0))
                time.sleep(0.05)
            if not got:
                raise RuntimeError(f"{path}: nothing arrived within {WARMUP_S:g} s")
            time.sleep(0.5)
            with lock:
                got.clear()
            me = psutil.Process()
            bridge_before, own_before, wall_before = _cpu_s(bridge_procs), _cpu_s([me]), time.monotonic()
            with measured_load() as load:
                period, start = 1.0 / rate_hz, time.monotonic()
                for seq in range(1, count + 1):
                    time.sleep(max(0.0, start + seq * period - time.monotonic()))
                    send(rosmsg.command(seq, time.time_ns(), 0.1, 0.0))
                time.sleep(0.5)
            wall = time.monotonic() - wall_before
            run.bridge_cpu_percent += 100.0 * (_cpu_s(bridge_procs) - bridge_before) / wall
            run.own_cpu_percent += 100.0 * (_cpu_s([me]) - own_before) / wall
            run.loads.append(load)
            run.sent += count
            with lock:
                run.latencies_ms += [v for k, v in got.items() if k]
        finally:
            host.close()
            robot.close()


def summary(run: PathRun, rounds: int, baseline: PathRun | None) -> dict:
    v = np.array(run.latencies_ms)
    p = dict(
        zip(("min", "p50", "p90", "p99"), np.percentile(v, [0, 50, 90, 99]).round(3).tolist(), strict=True)
    )
    row = {"path": run.path, "received": int(v.size), "sent": run.sent, **p}
    if baseline is not None and baseline.latencies_ms:
        b = np.array(baseline.latencies_ms)
        row["added_min_ms"] = round(float(v.min() - b.min()), 3)
        row["added_p50_ms"] = round(float(np.median(v) - np.median(b)), 3)
    row["bridge_cpu_percent"] = round(run.bridge_cpu_percent / rounds, 1)
    row["own_cpu_percent"] = round(run.own_cpu_percent / rounds, 1)
    row["conditions"] = loads_text(run.loads)
    return row


def markdown(rows: list[dict]) -> str:
    head = "| path | recv/sent | min | p50 | p90 | p99 | added min | added p50 | bridges+router CPU | kit CPU | conditions |"
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        added = (
            (f"{r['added_min_ms']:+.3f}", f"{r['added_p50_ms']:+.3f}") if "added_p50_ms" in r else ("", "")
        )
        lines.append(
            f"| {r['path']} | {r['received']}/{r['sent']} | {r['min']:.3f} | {r['p50']:.3f} | {r['p90']:.3f} | "
            f"{r['p99']:.3f} | {added[0]} | {added[1]} | {r['bridge_cpu_percent']:.1f} % | {r['own_cpu_percent']:.1f} % "
            f"| {r['conditions']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=400, help="commands per path and round")
    parser.add_argument("--rate", type=float, default=100.0, help="commands per second")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; paths interleaved in each")
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--json", type=Path, help="also write the figures and conditions here")
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-zenoh-bridge.json)"
    )
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        print(
            f"bench_zenoh_bridge: unknown path {unknown[0]!r} (choose from {', '.join(PATHS)})",
            file=sys.stderr,
        )
        return 2
    try:
        if any(p.endswith("bridged") for p in paths):
            find_bridge()
    except BridgeMissingError as exc:
        print(f"bench_zenoh_bridge: {exc}", file=sys.stderr)
        return 2
    runs = {p: PathRun(p) for p in paths}
    with tempfile.TemporaryDirectory(prefix="bench-bridge-") as tmp:
        for rnd in range(args.repeat):
            order = paths[rnd % len(paths) :] + paths[: rnd % len(paths)]
            for path in order:
                print(f"round {rnd + 1}/{args.repeat}: {path}", file=sys.stderr)
                measure(path, args.count, args.rate, Path(tmp), random.randint(1, 99), runs[path])
    baseline = runs.get("dds")
    rows = [summary(runs[p], args.repeat, baseline if p != "dds" else None) for p in paths]
    print(f"One-way latency (ms) of {args.count} TwistStamped at {args.rate:g} Hz x {args.repeat} rounds, "
          f"loopback, {os.cpu_count()} cores; added = over direct DDS. Reference: {REFERENCE}.")  # fmt: skip
    print(markdown(rows))
    if args.json:
        args.json.write_text(
            json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2)
        )
    if args.reference:
        write_reference(args.reference, reference_summary(args, runs, rows, argv))
    return 0


def reference_summary(
    args: argparse.Namespace, runs: dict[str, PathRun], rows: list[dict], argv: list[str] | None
) -> ZenohBridgeSummary:
    """The run as docs/networks.md quotes it (reference/, fieldtest.testkit.docblocks)."""
    table_rows = [
        ZenohBridgeRow(
            path=r["path"],
            sent=r["sent"],
            received=r["received"],
            min_ms=r["min"],
            p50_ms=r["p50"],
            p90_ms=r["p90"],
            p99_ms=r["p99"],
            added_min_ms=r.get("added_min_ms"),
            added_p50_ms=r.get("added_p50_ms"),
            bridge_cpu_percent=r["bridge_cpu_percent"],
            conditions=load_conditions(runs[r["path"]].loads),
        )  # fmt: skip
        for r in rows
    ]
    print("\n".join(zenoh_bridge_table(table_rows)))
    given = sys.argv[1:] if argv is None else argv
    return ZenohBridgeSummary(
        kind="zenoh-bridge", name=args.reference.stem,
        command=" ".join(["nice -n 10 .venv/bin/python benchmarks/bench_zenoh_bridge.py", *given]),
        measured_utc=utc_now(), machine=machine_text(), versions=software_versions(),
        settings={"count": args.count, "rate_hz": args.rate, "rounds": args.repeat, "paths": list(runs)},
        rows=table_rows,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
