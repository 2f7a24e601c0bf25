"""The benchmark's verdict on lap drift (benchmarks/bench_twin.py, drift part): the table and the
target line it prints from analyzed trials."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_twin.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_twin", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_twin"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _report(bench, *rows):
    report = bench.Report(settings={"drift_plan": "96 s plan (4 laps)", "parts": ["drift"]})
    report.drift.extend(rows)
    return report


def test_drift_target_met_only_when_every_middleware_is_within_1_mm(bench):
    ok = bench.DriftRow(
        "dds", "completed", drift_mm=0.34, received=1945, sent=1945, cpu_percent={"host": 1.9}
    )
    over = bench.DriftRow("mqtt-broker", "completed", drift_mm=1.2, received=1945, sent=1945)
    failed = bench.DriftRow("zenoh-router", "error", error="router exited")
    assert bench.drift_met(_report(bench, ok)) is True
    assert bench.drift_met(_report(bench, ok, over)) is False
    assert bench.drift_met(_report(bench, ok, failed)) is False  # a trial without a figure is no pass
    assert bench.drift_met(_report(bench)) is None
    (line,) = [x for x in bench.target_lines(_report(bench, ok, over, failed)) if "lap drift" in x]
    assert line.endswith("over or not measured: mqtt-broker 1.200 mm, zenoh-router - mm -> NOT MET")
    (line,) = [x for x in bench.target_lines(_report(bench, ok)) if "lap drift" in x]
    assert line.endswith("worst: dds 0.340 mm -> MET")
    table = "\n".join(bench.drift_table(_report(bench, ok, failed)))
    assert "dds" in table and "1945/1945" in table and "host 1.9" in table
    assert "zenoh-router       error: router exited" in table
