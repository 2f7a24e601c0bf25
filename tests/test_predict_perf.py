"""``fieldtest predict`` reads ``fieldtest perf`` output: a real row run on loopback, a hand-written
row with known latencies and losses, and a sweep with several rows (one line asking for one row)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fieldtest.analysis.prediction import predict as pr
from fieldtest.analysis.prediction.linktrace import TraceError, read_trace
from fieldtest.cli import main


@pytest.mark.parametrize("mode", ["roundtrip", "one-way"])
def test_a_perf_row_run_on_loopback_is_a_trace_of_its_relays_one_way_latency(tmp_path, mode):
    argv = ["--middleware", "dds", "--message", "Array1k", "--rate", "20", "--duration", "2",
            "--mode", mode, "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "fieldtest.cli", "perf", *argv], capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    row = tmp_path / "rows" / "000"
    sends = json.loads((row / "main.json").read_text())["sends"]
    arrivals = {
        seq: arrival - sent
        for seq, sent, arrival, *_ in json.loads((row / "relay1.json").read_text())["arrivals"]
    }
    assert len(sends) == 40 and sorted(arrivals) == list(range(40))  # reliable loopback: every one
    for trace in (read_trace(row), read_trace(tmp_path)):  # the row, or the sweep holding only it
        assert trace.kind == "fieldtest perf" and trace.source == str(row)
        assert trace.summary()["messages"] == 40 and trace.summary()["lost"] == 0
        assert np.all(trace.latency_s > 0)
        assert np.array_equal(trace.latency_s, [arrivals[seq] / 1e9 for seq in range(40)])
        assert np.array_equal(trace.t_s, (np.array(sends) - sends[0]) / 1e9)
        assert "Array1k at 20 Hz" in trace.notes[0]


RATE_HZ = 10.0
LOST = (5, 12)


def synthetic_row(row: Path, count: int = 20) -> np.ndarray:
    """A perf row in the layout fieldtest/perf/node.py writes: sends at 10 Hz (with jitter), relay
    arrivals out of order with one duplicate, ``LOST`` never arrived; the latencies (s, NaN lost)."""
    row.mkdir(parents=True)
    start = 5_000_000_000_000
    sends = [start + round(seq * 1e9 / RATE_HZ) + 137 * (seq % 3) for seq in range(count)]
    latency_ns = [1_000_000 + 250_000 * seq for seq in range(count)]
    arrivals = [[seq, sends[seq], sends[seq] + latency_ns[seq], sends[seq] + latency_ns[seq] + 40_000, 0]
                for seq in range(count) if seq not in LOST]  # fmt: skip
    arrivals = arrivals[::-1] + [[3, sends[3], sends[3] + 99_000_000, 0, 0]]  # a late duplicate of 3
    spec = {
        "message": "Array76",
        "rate_hz": RATE_HZ,
        "duration_s": count / RATE_HZ,
        "mode": "one-way",
        "relays": 1,
    }
    (row / "spec.json").write_text(json.dumps(spec))
    (row / "main.json").write_text(json.dumps({"sends": sends, "echoes": {"1": []}, "late_sends": 0}))
    (row / "relay1.json").write_text(json.dumps({"index": 1, "arrivals": arrivals}))
    expected = np.array(latency_ns, dtype=float) / 1e9
    expected[list(LOST)] = np.nan
    return expected


def test_a_hand_written_perf_row_gives_its_latencies_and_nan_where_lost(tmp_path):
    expected = synthetic_row(tmp_path / "row")
    trace = read_trace(tmp_path / "row")
    assert np.array_equal(trace.latency_s, expected, equal_nan=True)
    assert np.flatnonzero(trace.lost).tolist() == list(LOST)
    assert trace.t_s[0] == 0 and trace.t_s[10] == pytest.approx(1.0 + 137e-9)
    assert "Array76 at 10 Hz" in trace.notes[0] and "plan's command times" in trace.notes[0]


def test_a_10_hz_perf_row_feeds_each_of_its_messages_to_two_20_hz_commands(tmp_path):
    expected = synthetic_row(tmp_path / "row")
    trace = read_trace(tmp_path / "row")
    commands_s = np.arange(0.0, 2.0, 0.05)  # the plan's 20 Hz ticks over the 2 s trace
    got = pr.trace_latency_at(trace, commands_s)
    # each command takes the message sent nearest it: ticks k/20 s take message floor(k/2)
    assert np.array_equal(got, expected[np.arange(len(commands_s)) // 2], equal_nan=True)
    assert np.flatnonzero(np.isnan(got)).tolist() == [10, 11, 24, 25]  # one lost message, two commands


def test_a_perf_sweep_with_two_rows_asks_for_one_row_in_one_line(tmp_path, capsys):
    out = tmp_path / "sweep"
    synthetic_row(out / "rows" / "000")
    shutil.copytree(out / "rows" / "000", out / "rows" / "001")
    (out / "perf.json").write_text(json.dumps({"rows": [{}, {}]}))
    with pytest.raises(TraceError, match="pass one row directory"):
        read_trace(out)
    assert main(["predict", str(out), "--no-envelope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err
    assert "2 rows (rows/000, rows/001)" in err and "pass one row directory" in err
    assert main(["predict", str(out / "rows" / "001"), "--no-envelope", "--out", str(tmp_path / "p")]) == 0
    assert json.loads((tmp_path / "p" / "prediction.json").read_text())["trace"]["kind"] == "fieldtest perf"


@pytest.mark.parametrize(
    ("broken", "problem"),
    [("relay1.json", "perf row without relay1.json"), ("main.json", "perf row without main.json")],
)
def test_a_perf_row_that_did_not_run_is_one_line_naming_it(tmp_path, capsys, broken, problem):
    synthetic_row(tmp_path / "row")
    (tmp_path / "row" / broken).unlink()
    assert main(["predict", str(tmp_path / "row"), "--no-envelope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "row") in err and problem in err
