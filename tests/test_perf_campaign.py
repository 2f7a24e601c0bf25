"""``fieldtest perf --campaign FILE``: a perf sweep as a YAML matrix, repetitions with intervals.

The file follows a trial campaign's conventions (matrix, exclude, repetitions, order, seed; one
line naming the file and the field for a bad value); each case's repetitions are summarised by
their mean and its 95 % interval in cases.csv, perf.json and Table 2.
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from fieldtest.perf.cli import _parser, planned_rows
from fieldtest.perf.perfcampaign import expand_rows, load_perf_campaign, perf_campaign_json_schema
from fieldtest.perf.stats import MeanInterval, mean_interval

ROOT = Path(__file__).resolve().parents[1]
TRIALS = ROOT / "trials"
T_975_DF2 = 4.302652729911275  # Student's t, 97.5 % quantile, 2 degrees of freedom (tables)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def _perf(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldtest.cli", "perf", *argv], capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def test_the_table2_example_expands_every_case_three_times_interleaved():
    planned = expand_rows(load_perf_campaign(TRIALS / "perf-campaigns" / "zhang-table2.yaml"))
    cases = list(dict.fromkeys(case for case, _ in planned))
    # Zenoh rows on both paths, the others once: the path is a setting only Zenoh reads
    paths = {(c.middleware, c.zenoh_path) for c in cases}
    assert paths == {("dds", ""), ("zenoh-peer", "direct"), ("zenoh-peer", "bridge"),
                     ("zenoh-router", "direct"), ("zenoh-router", "bridge"),
                     ("mqtt-local-broker", ""), ("mqtt-broker", "")}  # fmt: skip
    assert len(cases) == 7 * 10 and len(planned) == 3 * 70
    assert [r for _, r in planned] == [0] * 70 + [1] * 70 + [2] * 70  # interleaved
    assert {(c.rate_hz, c.duration_s, c.mode) for c in cases} == {(10.0, 30.0, "roundtrip")}


def test_order_and_exclude_follow_the_campaign_conventions(tmp_path):
    text = ("perf: s\nmatrix: {middleware: [dds, mqtt-broker], message: [Array1k, Array4k]}\n"
            "exclude: [{middleware: dds, message: Array4k}]\nrepetitions: 2\norder: {order}\n")  # fmt: skip
    grouped = expand_rows(load_perf_campaign(_write(tmp_path, text.replace("{order}", "grouped"))))
    assert [(c.middleware, c.message, r) for c, r in grouped] == [
        ("dds", "Array1k", 0), ("dds", "Array1k", 1), ("mqtt-broker", "Array1k", 0),
        ("mqtt-broker", "Array1k", 1), ("mqtt-broker", "Array4k", 0), ("mqtt-broker", "Array4k", 1),
    ]  # fmt: skip
    shuffled = [expand_rows(load_perf_campaign(_write(tmp_path, text.replace("{order}", "shuffled"))))
                for _ in range(2)]  # fmt: skip
    assert shuffled[0] == shuffled[1] and sorted(shuffled[0], key=str) == sorted(grouped, key=str)


def test_security_on_and_quick_durations(tmp_path):
    path = _write(tmp_path, "perf: s\nbase: {security: 'on'}\nmatrix: {middleware: [dds, zenoh-router]}\n")
    args = _parser().parse_args(["--campaign", str(path), "--quick"])
    planned = planned_rows(args)
    assert [(c.security, c.duration_s) for c, _ in planned] == [("sros2", 2.0), ("mtls-acl", 2.0)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("perf: s\nmatrix: {message: [Array1k, Array3x]}\n", "matrix.message value 'Array3x': message 'Array3x'"),
        ("perf: s\nbase: {rate_hz: fast}\n", "base.rate_hz: Input should be a valid number"),
        ("perf: s\nbase: {qos: fastest}\n", "base.qos:"),
        ("perf: s\nmatrix: {zenoh_path: [tunnel], middleware: [zenoh-peer]}\n", "matrix.zenoh_path value 'tunnel'"),
        ("perf: s\nmatrix: {colour: [red]}\n", "matrix.colour: not a perf row field"),
        ("perf: s\nbase: {speed: 1}\n", "base.speed: not a perf row field"),
        ("perf: s\nmatrix: {message: [Array1k]}\nexclude: [{mode: one-way}]\n", "exclude[0].mode: not a matrix field"),
        ("perf: s\nmatrix: {message: [Array1k]}\nexclude: [{message: Array1k}]\n", "exclude: leaves no row"),
        ("perf: 'a b'\n", "perf: 'a b' is not a usable name"),
        ("perf: s\nrepetitions: 0\n", "repetitions: Input should be greater than or equal to 1"),
        ("perf: s\nmatrix: {middleware: [rmw-zenoh]}\n", "matrix.middleware value 'rmw-zenoh': middleware 'rmw-zenoh': lab only"),
        ("- just a list\n", "expected a mapping at the top level (perf:, base:, matrix:, ...)"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_line_naming_the_file_and_the_field(text, says, tmp_path):
    path = _write(tmp_path, text)
    done = _perf("--campaign", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fieldtest perf: {path}: ") and says in lines[0], (
        done.stderr
    )
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_sweep_flags_are_refused_beside_a_campaign(tmp_path):
    path = _write(tmp_path, "perf: s\n")
    done = _perf("--campaign", str(path), "--middleware", "dds", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "--middleware: not with --campaign" in done.stderr


def test_mean_interval_is_students_t():
    assert mean_interval([None]) == MeanInterval(n=0, mean=None, low=None, high=None)
    assert mean_interval([2.0, None]) == MeanInterval(n=1, mean=2.0, low=None, high=None)
    got = mean_interval([1.0, 2.0, 6.0])
    half = T_975_DF2 * statistics.stdev([1.0, 2.0, 6.0]) / 3**0.5
    assert got.n == 3 and got.mean == pytest.approx(3.0)
    assert (got.low, got.high) == pytest.approx((3.0 - half, 3.0 + half))


def test_repetitions_give_each_case_its_mean_and_interval(tmp_path):
    path = _write(
        tmp_path,
        "perf: reps\nbase: {middleware: dds, rate_hz: 20, duration_s: 1}\n"
        "matrix: {message: [Array1k]}\nrepetitions: 3\n",
    )
    done = _perf("--campaign", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    with (out / "perf.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["repetition"], r["status"]) for r in rows] == [("0", "ok"), ("1", "ok"), ("2", "ok")]
    means = [float(r["latency_mean (ms)"]) for r in rows]
    with (out / "cases.csv").open() as f:
        (case,) = list(csv.DictReader(f))
    assert (case["message"], case["runs"], case["ok"]) == ("Array1k", "3", "3")
    half = T_975_DF2 * statistics.stdev(means) / 3**0.5
    assert float(case["latency_mean (ms)"]) == pytest.approx(statistics.mean(means))
    assert float(case["latency_mean (ms) low95"]) == pytest.approx(statistics.mean(means) - half)
    assert float(case["latency_mean (ms) high95"]) == pytest.approx(statistics.mean(means) + half)
    assert float(case["relative_loss"]) == 0.0
    cases = json.loads((out / "perf.json").read_text())["cases"]
    assert len(cases) == 1 and cases[0]["figures"]["latency_mean (ms)"]["n"] == 3
    table = (out / "table2.md").read_text()
    assert "mean +- 95 % interval over 3 repetitions" in table
    assert f"| Array1k | {statistics.mean(means):.2f} +- {half:.2f} |" in table


def test_committed_schema_is_current():
    committed = json.loads((TRIALS / "perf-campaign.schema.json").read_text())
    assert committed == json.loads(json.dumps(perf_campaign_json_schema(), sort_keys=True)), (
        "regenerate trials/perf-campaign.schema.json from fieldtest.perf.perfcampaign.perf_campaign_json_schema()"
    )
