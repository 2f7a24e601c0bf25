#!/usr/bin/env python3
"""What each security setting costs: one-way latency and CPU per middleware, with and without security.

    .venv/bin/python benchmarks/bench_security.py                 # every middleware, about 6 minutes
    .venv/bin/python benchmarks/bench_security.py --quick         # shorter trials, about 3 minutes
    .venv/bin/python benchmarks/bench_security.py --middlewares dds,zenoh-peer --repeat 2 --json out.json
    .venv/bin/python benchmarks/bench_security.py --quick --reference reference/bench-security.json

Every row is a complete twin trial (``fieldtest.runner.run_twin_trial``: NatNet emulator, mocap
recorder, twin robot, twin host, plus the Zenoh router or Mosquitto broker), on loopback, one after
another; each secured row uses a fresh keystore made by ``prepare_trial_security``. For one
middleware the rows differ only in ``transport.security``: same plan, same QoS, same link. With
``--repeat N`` the whole set runs N times, the order of the settings rotated each time, and the
figures pool all repeats.

- Latency: from the robot's CommandReceipt of every command, received - sent (both stamped by
  this machine's clock, as the twin's clocks are one here), median and p99, and the change of the
  median against the same middleware's "none" row. The receipts' ``latency_s`` subtracts the
  robot's clock-offset estimate as well; its median is printed too ("offset-corrected"), but here
  it only adds the estimate's error, so the table is raw.
- CPU: per process (host, robot, router/broker), percent of one core while the commands stream
  (process CPU time between the first and last command, from psutil samples every 0.25 s), so the
  start-up (imports, handshakes) is not counted.

The seeds' figures are printed beside ours; they come from other links and payloads (see
docs/security.md, "Measured cost"), so compare the direction and the added milliseconds, not the
percentages one to one. ``--reference`` writes the summary docs/security.md's table is rendered from
(``fieldtest/record/reference.py``), each row with the machine's load, busy cores and steal over its
trials.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil
from bench_twin import Load, load_conditions, measured_load

from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.middleware import registry
from fieldtest.plan import SquarePlan
from fieldtest.record import (
    CMD_VEL_TOPIC,
    HOST_BAG,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    TrialRequest,
    read_bag,
    read_trial,
)
from fieldtest.record.reference import (
    SecurityCostRow,
    SecurityCostSummary,
    run_summary,
    write_reference,
)
from fieldtest.rosmsg import ns_of
from fieldtest.runner import run_twin_trial
from fieldtest.testkit.docblocks import security_cost_table

FULL_PLAN = SquarePlan(side_duration_s=1.0, laps=1, command_rate_hz=50.0)  # 17 s, 850 commands
QUICK_PLAN = SquarePlan(
    side_duration_s=1.0, turn_rate_dps=90.0, laps=1, command_rate_hz=50.0, start_delay_s=0.5
)
SAMPLE_PERIOD_S = 0.25
ROLES = {  # process role -> a string its command line contains
    "robot": "fieldtest.twin.robot",
    "host": "fieldtest.twin.host",
    "router": "fieldtest.middleware.zenoh.infra",
    "broker": "mosquitto",
}
# The seeds' security cost figures (reference only: other links, payloads, tools).
REFERENCES = (
    (
        "Zhang et al., Table 4",
        "Zenoh-TCP over 4G, Array1k, SROS2 vs none",
        "77.35 ms vs 72.11 ms mean (+7.3 %)",
    ),
    ("Chen 2019", "ROS 2 over ns-3 802.11a, Sensor QoS (best effort)", "+19 % latency"),
    ("Chen 2019", "same, Default QoS (reliable)", "+60 % latency"),
    ("Fernandez et al. 2020", "0.25-4 MB messages, QoS a-e", "> +140 % latency"),
    ("Kim et al. 2018", "SROS2 vs none, wired and wireless", "throughput roughly halved"),
)


class BenchError(RuntimeError):
    """A trial that produced no usable figures."""


# ---------------------------------------------------------------- CPU sampling


def _role_of(proc: psutil.Process) -> str | None:
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    for role, needle in ROLES.items():
        if needle in cmdline:
            return role
    return None


class CpuSampler:
    """Samples (wall time ns, CPU seconds) of this process' children by role, in a thread."""

    def __init__(self, period_s: float = SAMPLE_PERIOD_S):
        self.period_s = period_s
        self.samples: dict[tuple[str, int], list[tuple[int, float]]] = defaultdict(list)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._roles: dict[tuple[int, float], str] = {}

    def _sample(self) -> None:
        for child in psutil.Process().children(recursive=True):
            try:
                key = (child.pid, child.create_time())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            # Only a found role is remembered: between fork and exec a child still shows our command line.
            role = self._roles.get(key) or _role_of(child)
            if role is None:
                continue
            self._roles[key] = role
            try:
                times = child.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            self.samples[(role, child.pid)].append((time.time_ns(), times.user + times.system))

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def percent_between(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """Per role: CPU percent of one core between the samples closest inside [start, end]."""
        out: dict[str, float] = {}
        for (role, _pid), series in self.samples.items():
            inside = [(t, c) for t, c in series if start_ns <= t <= end_ns]
            if len(inside) < 2 or inside[-1][0] == inside[0][0]:
                continue
            (t0, c0), (t1, c1) = inside[0], inside[-1]
            out[role] = out.get(role, 0.0) + 100.0 * (c1 - c0) / ((t1 - t0) / 1e9)
        return out


# ---------------------------------------------------------------- one trial


@dataclass
class Row:
    middleware: str
    security: str
    latencies_ms: list[float] = field(default_factory=list)
    cpu_percent: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    corrected_ms: list[float] = field(default_factory=list)  # the receipts' offset-corrected latency_s
    run_p50_ms: list[float] = field(default_factory=list)  # each trial's own median: the spread is the noise
    received: int = 0
    planned: int = 0
    errors: list[str] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)  # the machine over each of the row's trials

    def p(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")

    def cpu(self, role: str) -> float:
        values = self.cpu_percent.get(role, [])
        return float(np.mean(values)) if values else float("nan")


def run_one(row: Row, plan: SquarePlan, qos: str, out: Path, domain_id: int) -> None:
    request = TrialRequest.model_validate(
        {
            "name": f"bench-{row.middleware}-{row.security}",
            "plan": plan.model_dump(),
            "transport": {"middleware": row.middleware, "security": row.security, "qos": qos},
        }
    )
    with CpuSampler() as sampler, measured_load() as load:
        result = run_twin_trial(request, out, domain_id=domain_id)
    row.loads.append(load)
    if result.end_reason == "interrupted":
        raise KeyboardInterrupt  # Ctrl-C ends the benchmark, not only the trial it hit
    if result.end_reason != "completed":
        row.errors.append(f"{result.trial_dir.name}: {result.end_reason} {result.detail}".strip())
        return
    record = read_trial(result.trial_dir)
    sent = read_bag(result.trial_dir / HOST_BAG).messages(CMD_VEL_TOPIC)
    receipts = read_bag(result.trial_dir / ROBOT_BAG).messages(RECEIPTS_TOPIC)
    if not sent or not receipts:
        row.errors.append(f"{result.trial_dir.name}: no commands sent or received")
        return
    latencies_ms = [(ns_of(msg.received) - ns_of(msg.sent)) / 1e6 for _, msg in receipts]
    row.latencies_ms += latencies_ms
    row.corrected_ms += [msg.latency_s * 1e3 for _, msg in receipts]
    row.run_p50_ms.append(float(np.median(latencies_ms)))
    row.received += len(receipts)
    row.planned += len(sent)
    for role, percent in sampler.percent_between(sent[0][0], sent[-1][0]).items():
        row.cpu_percent[role].append(percent)
    if record.request.transport.security != row.security:
        raise BenchError(f"{result.trial_dir}: ran with security {record.request.transport.security!r}")


# ---------------------------------------------------------------- the table


def reference_row(row: Row) -> SecurityCostRow:
    """The row as docs/security.md's table shows it (fieldtest.testkit.docblocks)."""
    cpu = {role: row.cpu(role) for role in row.cpu_percent}
    return SecurityCostRow(
        middleware=row.middleware, security=row.security,
        p50_ms=row.p(50) if row.latencies_ms else None, p99_ms=row.p(99) if row.latencies_ms else None,
        run_p50_ms=row.run_p50_ms,
        offset_corrected_p50_ms=float(np.median(row.corrected_ms)) if row.corrected_ms else None,
        cpu_percent={role: value for role, value in cpu.items() if not np.isnan(value)},
        received=row.received, sent=row.planned, errors=row.errors,
        conditions=load_conditions(row.loads),
    )  # fmt: skip


def reference_table() -> str:
    lines = ["| source | setup | security cost |", "|---|---|---|"]
    lines += [f"| {source} | {setup} | {cost} |" for source, setup, cost in REFERENCES]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--middlewares", default=",".join(MIDDLEWARES), help="comma-separated subset")
    parser.add_argument("--quick", action="store_true", help="8.5 s laps (90 deg/s turns) instead of 17 s")
    parser.add_argument(
        "--duration", type=float, help="stream at least this many seconds per trial (more laps)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="run the whole set N times (order rotated)")
    parser.add_argument("--qos", default="default", help="QoS profile (default: ROS 2 default, reliable)")
    parser.add_argument("--out", type=Path, help="keep the trial directories here (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-security.json)"
    )
    args = parser.parse_args(argv)

    plan = QUICK_PLAN if args.quick else FULL_PLAN
    if args.duration:  # whole laps, at least this long
        plan = SquarePlan.model_validate(
            {**plan.model_dump(), "laps": max(1, math.ceil(args.duration / plan.lap_s))}
        )
    middlewares = [m for m in args.middlewares.split(",") if m]
    rows = [Row(m, s) for m in middlewares for s in registry.get(m).security_settings]
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-security-"))
    print(
        f"{len(rows)} settings x {args.repeat} on loopback, plan {plan.total_s:g} s at {plan.command_rate_hz:g} Hz, "
        f"QoS {args.qos}, {os.cpu_count()} cores, trials in {out}",
        flush=True,
    )
    started = time.monotonic()
    for repeat in range(args.repeat):
        for middleware in middlewares:
            group = [r for r in rows if r.middleware == middleware]
            shift = repeat % len(group)
            for row in group[shift:] + group[:shift]:
                t0 = time.monotonic()
                run_one(row, plan, args.qos, out, domain_id=200 + repeat)
                status = f"p50 {row.p(50):.3f} ms" if row.latencies_ms else f"FAILED {row.errors}"
                print(
                    f"  {row.middleware:<18} {row.security:<20} {status}  ({time.monotonic() - t0:.0f} s)",
                    flush=True,
                )
    print(f"\nMeasured here ({time.monotonic() - started:.0f} s, load {os.getloadavg()[0]:.2f}):\n")
    table_rows = [reference_row(r) for r in rows if r.loads]
    print("\n".join(security_cost_table(table_rows)))
    print("\nThe seeds' figures (other links and payloads; reference only):\n")
    print(reference_table())
    if args.json:
        args.json.write_text(json.dumps([r.model_dump(mode="json") for r in table_rows], indent=1) + "\n")
    if args.reference:
        summary = run_summary(
            SecurityCostSummary,
            args.reference,
            "nice -n 10 .venv/bin/python benchmarks/bench_security.py",
            argv,
            {
                "plan": f"{plan.laps} lap(s), {plan.total_s:g} s at {plan.command_rate_hz:g} Hz",
                "qos": args.qos,
                "passes": args.repeat,
                "middlewares": middlewares,
            },
            table_rows,
        )
        write_reference(args.reference, summary)
    return 0 if all(r.latencies_ms for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
