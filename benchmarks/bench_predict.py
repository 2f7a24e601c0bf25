#!/usr/bin/env python3
"""``fieldtest predict`` against twin trials: predicted and measured lap drift side by side.

    .venv/bin/python benchmarks/bench_predict.py            # about 5 minutes (root: network namespaces)

Each case is a real twin trial (``run_twin_trial``: host, robot, NatNet emulator and recorder over
the middleware on an emulated link) with a link fault, analysed as ``fieldtest analyze`` does; its
recorded trial directory is then the trace for ``predict`` with the same plan. Prints a markdown
table: the trace's longest silence, predicted and measured lap drift (mean over the lap grid),
their difference, and the predicted and counted watchdog stops (the twin robot's, from trial.yaml's warnings).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.prediction.linktrace import read_trace
from fieldtest.analysis.prediction.predict import predict
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import run_twin_trial

PLAN = SquarePlan(side_duration_s=2.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
# (name, middleware, network, faults): lap 2 runs 12.5-24.5 s; side 1 12.5-14.5, its corner at 14.5
CASES = [
    ("no fault", "dds", "ethernet", []),
    ("wifi, no fault", "dds", "wifi", []),
    ("0.3 s in a side", "dds", "ethernet", [{"kind": "outage", "at_s": 13.0, "duration_s": 0.3}]),
    ("1.2 s in a side", "dds", "ethernet", [{"kind": "outage", "at_s": 13.0, "duration_s": 1.2}]),
    ("0.4 s across a corner", "dds", "ethernet", [{"kind": "outage", "at_s": 14.3, "duration_s": 0.4}]),
    ("1.0 s across a corner", "zenoh-peer", "wifi", [{"kind": "outage", "at_s": 14.2, "duration_s": 1.0}]),
    (
        "2.0 s in a turn",
        "mqtt-local-broker",
        "ethernet",
        [{"kind": "outage", "at_s": 14.6, "duration_s": 2.0}],
    ),
]


def run_case(name: str, middleware: str, network: str, faults: list, runs: Path) -> dict:
    request = TrialRequest(
        name="bench-predict", plan=PLAN, network=network, transport={"middleware": middleware}, faults=faults
    )
    result = run_twin_trial(request, runs)
    if result.end_reason != "completed":
        raise SystemExit(f"{name}: trial ended {result.end_reason}: {result.detail}")
    measured = analyze_trial(result.trial_dir, plots=False)
    got = predict(PLAN, read_trace(result.trial_dir))
    warnings = read_trial(result.trial_dir).outcome.warnings
    counted = sum(w.startswith("robot: command watchdog stopped") for w in warnings)
    return {
        "name": name,
        "middleware": middleware,
        "network": network,
        "silence_s": got["trace"]["longest_outage_s"],
        "predicted_m": got["predicted"]["drift_mean_m"],
        "measured_m": measured["drift"].get("mean_m"),
        "stops_predicted": got["predicted"]["watchdog_stops"],
        "stops_counted": counted,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="keep the trials here (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs or Path(tmp)
        rows = [run_case(*case, runs) for case in CASES]
    print("| case | middleware, network | longest silence | predicted drift | measured drift | "
          "difference | watchdog stops predicted / counted |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        diff = (r["predicted_m"] - r["measured_m"]) * 1e3 if r["measured_m"] is not None else float("nan")
        print(
            f"| {r['name']} | {r['middleware']}, {r['network']} | {r['silence_s']:.2f} s | "
            f"{r['predicted_m'] * 1e3:.1f} mm | {(r['measured_m'] or float('nan')) * 1e3:.1f} mm | "
            f"{diff:+.1f} mm | {r['stops_predicted']} / {r['stops_counted']} |"
        )


if __name__ == "__main__":
    main()
