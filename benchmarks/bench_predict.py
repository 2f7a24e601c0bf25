#!/usr/bin/env python3
"""``fieldtest predict`` against twin trials: predicted and measured lap drift side by side.

    .venv/bin/python benchmarks/bench_predict.py            # about 5 minutes (root: network namespaces)
    .venv/bin/python benchmarks/bench_predict.py --reference reference/bench-predict.json

Each case is a real twin trial (``run_twin_trial``: host, robot, NatNet emulator and recorder over
the middleware on an emulated link) with a link fault, analyzed as ``fieldtest analyze`` does; its
recorded trial directory is then the trace for ``predict`` with the same plan. Prints a markdown
table: the trace's longest silence, predicted and measured lap drift (mean over the lap grid),
their difference, and the predicted and counted watchdog stops (the twin robot's, from trial.yaml's warnings).
``--reference`` writes the summary docs/analysis.md's table is rendered from (``tools/render_docs.py``),
each case with the machine's load, busy share and steal over its trial.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.prediction.linktrace import read_trace
from fieldtest.analysis.prediction.predict import predict
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest, read_trial
from fieldtest.record.reference import PredictCaseRow, PredictSummary, run_summary, write_reference
from fieldtest.runner import run_twin_trial
from fieldtest.testkit.docblocks import predict_table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_twin import load_conditions, measured_load  # noqa: E402

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


def run_case(name: str, middleware: str, network: str, faults: list, runs: Path) -> PredictCaseRow:
    request = TrialRequest(
        name="bench-predict", plan=PLAN, network=network, transport={"middleware": middleware}, faults=faults
    )
    with measured_load() as load:
        result = run_twin_trial(request, runs)
    if result.end_reason != "completed":
        raise SystemExit(f"{name}: trial ended {result.end_reason}: {result.detail}")
    measured = analyze_trial(result.trial_dir, plots=False)
    got = predict(PLAN, read_trace(result.trial_dir))
    warnings = read_trial(result.trial_dir).outcome.warnings
    measured_m = measured.drift.mean_m
    return PredictCaseRow(
        case=name,
        middleware=middleware,
        network=network,
        longest_silence_s=got["trace"]["longest_outage_s"],
        predicted_drift_mm=got["predicted"]["drift_mean_m"] * 1e3,
        measured_drift_mm=None if measured_m is None else measured_m * 1e3,
        stops_predicted=got["predicted"]["watchdog_stops"],
        stops_counted=sum(w.startswith("robot: command watchdog stopped") for w in warnings),
        conditions=load_conditions([load]),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, help="keep the trials here (default: a temporary folder)")
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-predict.json)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs or Path(tmp)
        rows = []
        for case in CASES:
            rows.append(run_case(*case, runs))
            print("\n".join(predict_table(rows[-1:])[2:]), flush=True)
    print("\n".join(predict_table(rows)))
    if args.reference:
        settings = {"plan": "square, 2 s sides, 90 deg/s turns, 2 laps", "cases": len(CASES)}
        write_reference(
            args.reference,
            run_summary(
                PredictSummary,
                args.reference,
                ".venv/bin/python benchmarks/bench_predict.py",
                argv,
                settings,
                rows,
            ),
        )


if __name__ == "__main__":
    main()
