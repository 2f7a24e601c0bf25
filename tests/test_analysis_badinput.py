"""Bad input gives a one-line error (exit 2) or a flagged partial result, never a traceback."""

import json
import subprocess
import sys

import pytest
import yaml

from fieldtest.analysis import analyze_trial
from fieldtest.cli import main
from fieldtest.names import STOP_BURST_COUNT
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize


def fieldtest_analyze(argv: list[str]) -> int:
    return main(["analyze", *argv])


def fieldtest_compare(argv: list[str]) -> int:
    return main(["compare", *argv])


SHORT = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    trial = tmp_path_factory.mktemp("good") / "trial"
    synthesize(trial, SynthSpec(plan=SHORT, last_lap_shift_m=(0.02, 0.0)))
    return trial


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    shutil.rmtree(dst / "analysis", ignore_errors=True)
    return dst


def _one_line_error(capsys, code, *needles):
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_missing_trial_directory(tmp_path, capsys):
    code = fieldtest_analyze([str(tmp_path / "nope")])
    _one_line_error(capsys, code, "nope", "no such trial directory")


def test_missing_trial_yaml(tmp_path, good, capsys):
    trial = _copy(good, tmp_path / "t")
    (trial / "trial.yaml").unlink()
    code = fieldtest_analyze([str(trial)])
    _one_line_error(capsys, code, "trial.yaml", "missing")


def test_unknown_format_version(tmp_path, good, capsys):
    trial = _copy(good, tmp_path / "t")
    raw = yaml.safe_load((trial / "trial.yaml").read_text())
    raw["format_version"] = 99
    (trial / "trial.yaml").write_text(yaml.safe_dump(raw))
    code = fieldtest_analyze([str(trial)])
    _one_line_error(capsys, code, "trial.yaml", "unknown format_version 99")


def test_no_bag_at_all(tmp_path, good, capsys):
    trial = tmp_path / "t"
    trial.mkdir()
    (trial / "trial.yaml").write_text((good / "trial.yaml").read_text())
    code = fieldtest_analyze([str(trial)])
    _one_line_error(capsys, code, "no readable bag")


def test_unreadable_mocap_bag_gives_a_partial_result_naming_it(tmp_path, good, capsys):
    trial = _copy(good, tmp_path / "t")
    for f in (trial / "mocap").glob("*.mcap"):
        f.write_bytes(b"garbage" * 10)
    assert fieldtest_analyze([str(trial), "--no-plots"]) == 0
    out = capsys.readouterr().out
    m = json.loads((trial / "analysis" / "metrics.json").read_text())
    assert m["partial"] is True
    assert any("mocap_0.mcap: not an MCAP file" in r for r in m["partial_reasons"])
    assert any(r.startswith("no ground truth") for r in m["partial_reasons"])
    assert m["latency"]["available"] is True  # the other bags still count
    assert "partial: " in out and "drift n/a" in out
    assert fieldtest_analyze([str(trial), "--no-plots", "--strict"]) == 1


def test_truncated_bags_are_read_to_the_cut_and_flagged(tmp_path):
    trial = tmp_path / "t"
    synthesize(trial, SynthSpec(plan=SHORT, truncate={"mocap": 0.6, "robot": 0.5}))
    m = analyze_trial(trial)
    assert m.partial is True
    assert m.progress.laps_completed < 3
    assert any("mocap_0.mcap: cut off" in w for w in m.warnings)
    assert any("robot_0.mcap: cut off" in w for w in m.warnings)
    assert m.inputs.bags["mocap"].truncated is True
    assert m.latency.lost > 0  # receipts after the robot bag's cut are missing
    assert (trial / "analysis" / "report.md").read_text().count("cut off") >= 2


def test_fewer_laps_than_planned(tmp_path):
    trial = tmp_path / "t"
    stop = SHORT.lap_start_s(1) + 0.6 * SHORT.lap_s  # the host stops during lap 2
    synthesize(trial, SynthSpec(plan=SHORT, stop_after_s=stop))
    m = analyze_trial(trial)
    assert m.partial is True
    assert "1 of 3 planned laps completed" in m.partial_reasons
    assert any(r.startswith("trial ended early (host-stopped") for r in m.partial_reasons)
    p = m.progress
    assert p.laps_completed == 1 and p.laps_commanded == 1 and p.ended_early is True
    assert (
        p.last_seq_sent == SHORT.n_ticks() + STOP_BURST_COUNT - 1
    )  # the stop burst, numbered after the plan
    assert p.last_seq_received == p.last_seq_sent
    assert m.drift.available is False and "two complete laps" in m.drift.reason
    assert m.ape.available is True  # the part that was driven is still compared with the ideal
    report = (trial / "analysis" / "report.md").read_text()
    assert "Partial result" in report and "1 completed of 3 planned" in report
    # the APE window ends with the commanded motion: the robot stopping is not counted as error
    assert m.ape.window_s[1] == pytest.approx(m.motion.start_s + stop - SHORT.start_delay_s, abs=0.06)
    assert m.ape.max_m < 1e-6


def test_two_of_three_laps_gives_drift_between_lap_1_and_lap_2(tmp_path):
    trial = tmp_path / "t"
    synthesize(trial, SynthSpec(plan=SHORT, stop_after_s=SHORT.lap_start_s(2) + 1.0))
    m = analyze_trial(trial, plots=False)
    assert m.partial is True and m.drift.available is True and m.drift.last_lap == 2


def test_compare_with_a_bad_trial_among_good_ones(tmp_path, good, capsys):
    bad = tmp_path / "runs" / "bad"
    bad.mkdir(parents=True)
    (bad / "trial.yaml").write_text("format_version: 1\ntrial_id: [unclosed\n")
    _copy(good, tmp_path / "runs" / "good")
    assert fieldtest_compare([str(tmp_path / "runs"), "--out", str(tmp_path / "cmp")]) == 0
    captured = capsys.readouterr()
    assert "skipped:" in captured.err and "trial.yaml: not valid YAML" in captured.err
    assert "1 trials in 1 configurations" in captured.out
    assert (
        fieldtest_compare([str(tmp_path / "empty_dir_that_is_missing"), "--out", str(tmp_path / "c2")]) == 2
    )


def test_the_fieldtest_command_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fieldtest.cli", "analyze", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
