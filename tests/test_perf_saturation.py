"""``fieldtest perf --rate max``: saturation rows on real transports over loopback.

Mechanism, not speed: a saturation row delivers more than a fixed-rate row of the same run offers,
a reliable writer is held back by a slow reader (and a best-effort one is not), the MQTT writer's
queue stays within its window, loss is counted exactly, and the combinations that make no sense are
refused in one line.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_perf import interrupt_after_first_row

from fieldtest.perf.node import WRITER_WINDOW
from fieldtest.perf.results import write_all
from fieldtest.perf.run import SATURATION, PerfCase, PerfInputError, check_case, run_row

SLOW_READER_S = 0.002  # each relay spends 2 ms on every message: a reader far slower than the writer


def _row(tmp_path: Path, name: str, *, middleware="dds", qos="default", rate=SATURATION, work=0.0):
    case = PerfCase(
        middleware=middleware, qos=qos, message="Array1k", rate_hz=rate, duration_s=1.0, mode="one-way"
    )
    row = run_row(case, tmp_path / name, drain_s=1.0, relay_work_s=work)
    assert row.status == "ok", row.error
    return row


@pytest.mark.parametrize("middleware", ["dds", "zenoh-peer", "mqtt-local-broker"])
def test_saturation_delivers_more_than_a_fixed_rate_row_offers(middleware, tmp_path):
    fixed = _row(tmp_path, "fixed", middleware=middleware, rate=200.0)
    saturated = _row(tmp_path, "max", middleware=middleware)
    f, s = fixed.figures, saturated.figures
    # a ratio against the same run's fixed row: publishing back to back outruns 200 Hz many times
    assert s["throughput_received (msg/s)"] > 3 * f["throughput_sent (msg/s)"], (s, f)
    assert s["sent"] == s["received"] + s["lost"] and s["sent"] > 3 * f["sent"]
    assert s["throughput_received (MB/s)"] == pytest.approx(s["throughput_received (msg/s)"] * 1024 / 1e6)
    assert s["throughput_sent (msg/s)"] >= s["throughput_received (msg/s)"] > 0
    assert s["one_way_mean (ms)"] is not None and s["late_sends"] == 0
    write_all([fixed, saturated], tmp_path / "out", {})
    lines = list(csv.DictReader((tmp_path / "out" / "perf.csv").open()))
    assert [line["rate_hz"] for line in lines] == ["200.0", "0.0"]  # performance_test's rate 0
    assert float(lines[1]["throughput_sent (msg/s)"]) == pytest.approx(s["throughput_sent (msg/s)"])
    assert "max rate" in (tmp_path / "out" / "table2.md").read_text()


def test_a_slow_reader_holds_a_reliable_writer_back_not_a_best_effort_one(tmp_path):
    """Zenoh: congestion control BLOCK for RELIABLE waits for the queue; DROP for BEST_EFFORT does not."""
    reliable = _row(tmp_path, "reliable", middleware="zenoh-peer", qos="default", work=SLOW_READER_S)
    best_effort = _row(tmp_path, "best", middleware="zenoh-peer", qos="sensor", work=SLOW_READER_S)
    assert reliable.figures["sent"] * 4 < best_effort.figures["sent"], (reliable.figures, best_effort.figures)


def test_the_mqtt_writer_queue_stays_within_its_window(tmp_path):
    row = _row(tmp_path, "mqtt", middleware="mqtt-local-broker", work=SLOW_READER_S)
    assert 0 < row.figures["writer_backlog_max"] <= WRITER_WINDOW
    # the reader cannot keep up: most messages are not delivered, and every one is accounted for
    assert row.figures["lost"] > 0 and row.figures["sent"] == row.figures["received"] + row.figures["lost"]


@pytest.mark.parametrize(("middleware", "qos"), [("dds", "sensor"), ("mqtt-local-broker", "default")])
def test_loss_is_counted_message_by_message_when_the_reader_is_slowed(middleware, qos, tmp_path):
    row = _row(tmp_path, "slow", middleware=middleware, qos=qos, work=SLOW_READER_S)
    main = json.loads((tmp_path / "slow" / "main.json").read_text())
    relay = json.loads((tmp_path / "slow" / "relay1.json").read_text())
    got = {seq for seq, *_ in relay["arrivals"] if seq < len(main["sends"])}
    f = row.figures
    assert f["sent"] == len(main["sends"]) and f["received"] == len(got)
    assert f["lost"] == f["sent"] - len(got) > 0
    assert f["relative_loss"] == pytest.approx(f["lost"] / f["sent"])


def test_saturation_refuses_round_trips_in_one_line():
    with pytest.raises(PerfInputError, match="^mode roundtrip: a saturation row") as refused:
        check_case(PerfCase(rate_hz=SATURATION, mode="roundtrip"))
    assert refused.value.field == "mode"
    check_case(
        PerfCase(rate_hz=SATURATION, mode="one-way", network="wifi", message="Array2m")
    )  # no link rate


def _perf(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fieldtest.cli", "perf", *argv], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rate", "max"], "mode roundtrip: a saturation row (rate max) runs one-way"),
        (["--rate", "fast", "--mode", "one-way"], "rate: 'fast', use a number of Hz or max"),
        (["--rate", "0"], "or max: as fast as the middleware accepts"),
    ],
)
def test_bad_rate_input_is_one_line(argv, says, tmp_path):
    done = _perf(*argv, "--middleware", "dds", "--out", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert not (tmp_path / "rows").exists()


def test_a_campaign_asks_for_saturation_with_max(tmp_path):
    from fieldtest.perf.perfcampaign import expand_rows, parse_perf_campaign

    sweep = parse_perf_campaign(
        {"perf": "sat", "base": {"middleware": "dds", "mode": "one-way"}, "matrix": {"rate_hz": ["max", 10]}}
    )
    rows = [case for case, _rep in expand_rows(sweep)]
    assert [case.rate_hz for case in rows] == [SATURATION, 10.0]
    assert rows[0].saturated and "max rate" in rows[0].label


def test_ctrl_c_in_a_saturation_sweep_keeps_the_finished_rows(tmp_path):
    returncode, err = interrupt_after_first_row(tmp_path, "--rate", "max", "--mode", "one-way")
    assert returncode == 130 and "kept the" in err, err
    lines = list(csv.DictReader((tmp_path / "perf.csv").open()))
    assert 1 <= len(lines) < 4 and all(line["status"] == "ok" and line["rate_hz"] == "0.0" for line in lines)
    assert all(int(line["sent"]) > 0 and line["throughput_received (msg/s)"] for line in lines)
