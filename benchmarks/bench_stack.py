"""Stack-induced lap drift per middleware on this machine, with and without one core kept busy.

A script, not a test: it never fails because a figure is high. For each load condition ("none",
and "one core busy": a plain spinning process at normal priority) it runs loopback campaigns of
every middleware x ``--reps`` valid repetitions through the trial runner, re-running each invalid
trial alone (each re-run counted), and prints per middleware the median stack-induced drift
(metrics ``stack.stack_drift_m``: the lap drift the machine's own timing explains,
docs/analysis.md), the wall time per valid trial, the CPU steal and busy share measured over the
same campaign, and whether it meets the stack's targets:

- every campaign completes with ``--reps`` valid trials per middleware;
- every kept trial has stack-induced drift <= 1 mm;
- two campaigns of the same condition give per-middleware medians within 0.3 mm of each other.

    .venv/bin/python benchmarks/bench_stack.py --quick                 # 2 campaigns x 5 x 3, two-lap trials
    .venv/bin/python benchmarks/bench_stack.py --loads none --reps 3   # full 96 s trials, no added load
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

from fieldtest.analysis.causes.stackfaults import STACK_DRIFT_BOUND_M
from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.machine import MachineMonitor, describe
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.runner import QUICK_PLAN
from fieldtest.runner.batches import any_interrupted, run_and_rerun
from fieldtest.trialcampaign import Campaign, expand, parse_campaign

MEDIAN_AGREEMENT_M = 0.0003  # two campaigns' per-middleware medians


def _spin() -> None:
    while True:
        pass


class BusyCore:
    """One plain spinning process at normal priority (the scheduler may put it on any core)."""

    def __enter__(self) -> BusyCore:
        self.proc = multiprocessing.get_context("fork").Process(target=_spin, daemon=True)
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.join()


def _requests(
    middlewares: list[str], reps: int, plan: SquarePlan, tag: str, order: str
) -> list[TrialRequest]:
    """The campaign's trials through the kit's own campaign expansion (fieldtest.trialcampaign).

    Interleaved by default, as in every campaign: the hypervisor steals CPU in episodes of a few
    minutes, and run back to back one middleware's three repetitions could all fall in one."""
    spec = {
        "campaign": tag,
        "base": {"plan": plan.model_dump()},
        "matrix": {"middleware": middlewares},
        "repetitions": reps,
        "order": order,
    }
    return expand(parse_campaign(spec, f"bench_stack {tag}"))


def campaign(
    middlewares: list[str], reps: int, plan: SquarePlan, out: Path, tag: str, reruns: int, order: str
) -> dict:
    """One campaign, trials one at a time (the runner's re-run of invalid trials included)."""
    requests = _requests(middlewares, reps, plan, tag, order)
    started = time.monotonic()
    with MachineMonitor(sample_s=1.0) as monitor:
        _, metrics, every, rerun_count = run_and_rerun(requests, out, 1, reruns)
    if any_interrupted(every):
        raise KeyboardInterrupt  # the runner stopped on Ctrl-C or SIGTERM: so does the benchmark
    wall_s = time.monotonic() - started
    rows = {}
    for m in middlewares:
        kept = [x for r, x in zip(requests, metrics, strict=True) if r.transport.middleware == m]
        valid = [
            x.stack.stack_drift_m for x in kept if x is not None and x.stack is not None and x.stack.valid
        ]
        rows[m] = {
            "valid": len(valid),
            "invalid_kept": len(kept) - len(valid),
            "stack_drift_mm": [round(v * 1e3, 3) for v in valid],
            "median_mm": round(statistics.median(valid) * 1e3, 3) if valid else None,
        }
    n_valid = sum(r["valid"] for r in rows.values())
    return {
        "tag": tag,
        "order": order,
        "trials_run": len(every),
        "reruns": rerun_count,
        "wall_s": round(wall_s, 1),
        "wall_per_valid_trial_s": round(wall_s / n_valid, 1) if n_valid else None,
        "machine": monitor.report(),
        "rows": rows,
    }


def targets(runs: list[dict], reps: int) -> list[str]:
    lines = []
    complete = all(r["valid"] >= reps for run in runs for r in run["rows"].values())
    lines.append(f"every campaign has {reps} valid trials per middleware: {'MET' if complete else 'NOT MET'}")
    worst = max((v for run in runs for r in run["rows"].values() for v in r["stack_drift_mm"]), default=None)
    ok = worst is not None and worst <= STACK_DRIFT_BOUND_M * 1e3
    lines.append(
        f"every kept trial's stack-induced drift <= 1 mm (worst {worst} mm): {'MET' if ok else 'NOT MET'}"
    )
    if len(runs) >= 2:
        diffs = {
            m: abs(runs[0]["rows"][m]["median_mm"] - runs[1]["rows"][m]["median_mm"])
            for m in runs[0]["rows"]
            if runs[0]["rows"][m]["median_mm"] is not None and runs[1]["rows"][m]["median_mm"] is not None
        }
        agree = len(diffs) == len(runs[0]["rows"]) and all(
            d <= MEDIAN_AGREEMENT_M * 1e3 for d in diffs.values()
        )
        shown = ", ".join(f"{m} {d:.3f}" for m, d in diffs.items())
        lines.append(f"two campaigns' medians within 0.3 mm ({shown} mm): {'MET' if agree else 'NOT MET'}")
    return lines


def print_campaign(run: dict) -> None:
    print(f"\n{run['tag']}: {run['trials_run']} trials run ({run['reruns']} re-runs), {run['wall_s']} s, "
          f"{run['wall_per_valid_trial_s']} s per valid trial")  # fmt: skip
    print(f"  {describe(run['machine'])}")
    print("  | middleware | valid | invalid kept | stack-induced drift, valid trials (mm) | median (mm) |")
    print("  | --- | --- | --- | --- | --- |")
    for m, r in run["rows"].items():
        print(
            f"  | {m} | {r['valid']} | {r['invalid_kept']} | {', '.join(map(str, r['stack_drift_mm']))} | {r['median_mm']} |"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two-lap trials instead of the 96 s plan")
    parser.add_argument("--reps", type=int, default=3, help="valid repetitions per middleware (default 3)")
    parser.add_argument("--campaigns", type=int, default=2, help="campaigns per load condition (default 2)")
    parser.add_argument("--loads", default="none,one-core", help="load conditions: none, one-core")
    parser.add_argument("--middlewares", default=",".join(MIDDLEWARES))
    parser.add_argument("--reruns", type=int, default=3, help="re-runs allowed per invalid trial (default 3)")
    parser.add_argument("--keep", type=Path, help="keep trial directories here (default: temporary)")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON")
    parser.add_argument(
        "--order",
        default="interleaved",
        choices=get_args(Campaign.model_fields["order"].annotation),
        help="trial order within a campaign, as in campaign files (default interleaved)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = QUICK_PLAN if args.quick else SquarePlan()
    middlewares = [m for m in args.middlewares.split(",") if m]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-stack-") as tmp:
        out = args.keep or Path(tmp)
        for load in [x for x in args.loads.split(",") if x]:
            runs = []
            for k in range(args.campaigns):
                tag = f"{load}-c{k + 1}"
                print(f"campaign {tag} ...", file=sys.stderr)
                with BusyCore() if load == "one-core" else contextlib.nullcontext():
                    runs.append(
                        campaign(middlewares, args.reps, plan, out / tag, tag, args.reruns, args.order)
                    )
                print_campaign(runs[-1])
            print(f"\ntargets, load {load}:")
            for line in targets(runs, args.reps):
                print(f"  {line}")
            results[load] = runs
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
