#!/usr/bin/env python3
"""How long the router or broker itself holds a command in a twin trial, and whether it ran real-time.

    .venv/bin/python benchmarks/bench_forwarding.py                        # zenoh-router, mqtt-local-broker x 3
    .venv/bin/python benchmarks/bench_forwarding.py --middlewares zenoh-router --repeat 5
    .venv/bin/python benchmarks/bench_forwarding.py --reference reference/bench-forwarding.json

Each row is a complete quick twin trial (``fieldtest.runner.run_twin_trial``, loopback, one at a
time; zenoh-router on the bridged path as the twin runs it: zenohd as router plus two bridges). The
forwarding probe (``fieldtest.twin.fwdprobe``) measures the round trip through the router or
broker for the whole stream; the trial's own machine monitor gives the conditions of the same
window (load, busy share, CPU steal); ``outcome.stack.realtime`` says which forwarders ran at
SCHED_FIFO; the lap drift comes from the trial's analysis.

``--reference`` writes the summary docs/benchmarks.md's table is rendered from
(``fieldtest/record/reference.py``). Not a pass/fail target: figures on a shared 2-core machine move
with its load; read them beside the conditions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench_twin import load_conditions, measured_load

from fieldtest.record import TrialRequest, read_trial
from fieldtest.record.reference import (
    Conditions,
    ForwardingRow,
    ForwardingSummary,
    run_summary,
    write_reference,
)
from fieldtest.runner import QUICK_PLAN, run_twin_trial
from fieldtest.testkit.docblocks import forwarding_table


def run_row(middleware: str, repetition: int, out: Path) -> ForwardingRow:
    request = TrialRequest(
        name=f"bench-fwd-{middleware}-r{repetition}",
        plan=QUICK_PLAN,
        transport={"middleware": middleware},
        repetition=repetition,
    )
    with measured_load() as load:
        result = run_twin_trial(request, out)
    if result.end_reason != "completed":  # no record: the machine over the whole attempt
        return ForwardingRow(
            middleware=middleware, repetition=repetition, end_reason=result.end_reason,
            detail=result.detail.splitlines()[0][:200] if result.detail else "",
            conditions=load_conditions([load]),
        )  # fmt: skip
    stack = read_trial(result.trial_dir).outcome.stack
    fwd, machine = stack.get("forwarding") or {}, stack.get("machine") or {}
    return ForwardingRow(
        middleware=middleware, repetition=repetition, end_reason=result.end_reason,
        rtt_p50_ms=fwd.get("rtt_p50_ms"), rtt_p99_ms=fwd.get("rtt_p99_ms"), rtt_max_ms=fwd.get("rtt_max_ms"),
        samples=fwd.get("samples", 0), drift_mm=_drift_mm(result.trial_dir), realtime=stack.get("realtime") or {},
        conditions=Conditions(
            load_1min=machine.get("loadavg_1min"), busy_percent=[machine.get("busy_pct", 0.0)],
            steal_percent=machine.get("steal_pct", 0.0), steal_max_percent=machine.get("steal_max_pct"),
        ),
    )  # fmt: skip


def _drift_mm(trial_dir: Path) -> float | None:
    from fieldtest.analysis import analyze_trial

    drift = analyze_trial(trial_dir).drift
    return drift.mean_m * 1000 if drift.available and drift.mean_m is not None else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--middlewares", default="zenoh-router,mqtt-local-broker")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the trials here (default: a temporary dir)"
    )
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-forwarding.json)"
    )
    args = parser.parse_args(argv)
    middlewares = [m for m in args.middlewares.split(",") if m]
    rows: list[ForwardingRow] = []
    with tempfile.TemporaryDirectory(prefix="bench-fwd-") as tmp:
        out = args.out or Path(tmp)
        for repetition in range(args.repeat):
            for middleware in middlewares:  # interleaved: a change in the machine's load hits every one
                rows.append(run_row(middleware, repetition, out))
                print("\n".join(forwarding_table(rows[-1:])[2:]), flush=True)
    print("\nquick plan, loopback, one trial at a time\n" + "\n".join(forwarding_table(rows)))
    if args.reference:
        settings = {"middlewares": middlewares, "repetitions": args.repeat, "plan": "quick"}
        write_reference(
            args.reference,
            run_summary(
                ForwardingSummary, args.reference, "nice -n 10 .venv/bin/python benchmarks/bench_forwarding.py",
                argv, settings, rows,
            ),
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
