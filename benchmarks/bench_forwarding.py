#!/usr/bin/env python3
"""How long the router or broker itself holds a command in a twin trial, and whether it ran real-time.

    .venv/bin/python benchmarks/bench_forwarding.py                        # zenoh-router, mqtt-local-broker x 3
    .venv/bin/python benchmarks/bench_forwarding.py --middlewares zenoh-router --repeat 5

Each row is a complete quick twin trial (``fieldtest.runner.run_twin_trial``, loopback, one at a
time; zenoh-router on the bridged path as the twin runs it: zenohd as router plus two bridges). The
forwarding probe (``fieldtest.twin.fwdprobe``) measures the round trip through the router or
broker for the whole stream; the trial's own machine monitor gives the conditions of the same
window (load, busy share, CPU steal); ``outcome.stack.realtime`` says which forwarders ran at
SCHED_FIFO; the lap drift comes from the trial's analysis.

Reference: forwarding probe p99 81 ms for the bridged zenoh-router with its router and bridges at
normal priority, 3-7 ms for the brokers (this machine, a busy hour). Not a pass/fail target:
figures on a shared 2-core machine move with its load; read them beside the conditions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import QUICK_PLAN, run_twin_trial

REFERENCE_P99_MS = {"zenoh-router": 81.0, "mqtt-local-broker": 7.0, "mqtt-broker": 7.0}


def run_row(middleware: str, repetition: int, out: Path) -> str:
    request = TrialRequest(
        name=f"bench-fwd-{middleware}-r{repetition}",
        plan=QUICK_PLAN,
        transport={"middleware": middleware},
        repetition=repetition,
    )
    result = run_twin_trial(request, out)
    if result.end_reason != "completed":
        return f"{middleware:<18} r{repetition}  {result.end_reason}: {result.detail.splitlines()[0][:80]}"
    stack = read_trial(result.trial_dir).outcome.stack
    fwd, machine = stack.get("forwarding") or {}, stack.get("machine") or {}
    realtime = stack.get("realtime")
    rt = (
        "-"
        if realtime is None
        else ",".join(f"{k}={'yes' if v else 'no'}" for k, v in sorted(realtime.items()))
    )
    return (
        f"{middleware:<18} r{repetition}  {_ms(fwd.get('rtt_p50_ms'))} {_ms(fwd.get('rtt_p99_ms'))} "
        f"{_ms(fwd.get('rtt_max_ms'))} {fwd.get('samples', 0):>5}  {_drift_mm(result.trial_dir):>6}  "
        f"ref p99 {REFERENCE_P99_MS.get(middleware, float('nan')):g} ms  "
        f"load {machine.get('loadavg_1min', float('nan')):.2f}, busy {machine.get('busy_pct', float('nan')):.0f} %, "
        f"steal {machine.get('steal_pct', float('nan')):.1f} % (max {machine.get('steal_max_pct', float('nan')):.0f} %)"
        f"  realtime {rt}"
    )


def _ms(value: float | None) -> str:
    return f"{'-':>7}" if value is None else f"{value:7.2f}"


def _drift_mm(trial_dir: Path) -> str:
    from fieldtest.analysis import analyze_trial

    drift = analyze_trial(trial_dir).get("drift") or {}
    return (
        f"{drift['mean_m'] * 1000:.2f}"
        if drift.get("available") and drift.get("mean_m") is not None
        else "n/a"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--middlewares", default="zenoh-router,mqtt-local-broker")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the trials here (default: a temporary dir)"
    )
    args = parser.parse_args(argv)
    middlewares = [m for m in args.middlewares.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="bench-fwd-") as tmp:
        out = args.out or Path(tmp)
        print(f"{'middleware':<18} rep  fwd p50     p99     max  samples drift mm  (quick plan, loopback)")
        for repetition in range(args.repeat):
            for middleware in middlewares:  # interleaved: a change in the machine's load hits every one
                print(run_row(middleware, repetition, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
