"""What the base received against what the host sent: counts, missing,
reordered, changed values, lateness, and the warning when the base got fewer commands or none, in
metrics.json and the report; "not available" in a lab trial without a base record."""

from __future__ import annotations

import pytest
import yaml

from fieldtest import rosmsg
from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.basereceived import MISSING_WARNING_SHARE
from fieldtest.analysis.metrics.schema import BaseReceived
from fieldtest.analysis.pipeline import add_base_record
from fieldtest.plan import SquarePlan
from fieldtest.record import CMD_VEL_TOPIC, read_bag
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR, HEADER, read_base_commands
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
LATENCY_S = 0.004


def sent_commands(trial) -> list[tuple[int, int, float, float]]:
    """(seq, sent ns, linear, angular) of every command in the host bag."""
    out = []
    for _, msg in read_bag(trial / "host").messages(CMD_VEL_TOPIC):
        seq = rosmsg.seq_of(msg.header.frame_id)
        sent = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        out.append((-1 if seq is None else seq, sent, msg.twist.linear.x, msg.twist.angular.z))
    return out


def write_record(trial, rows, stamped: bool = True) -> None:
    """A base record as the simulated base writes it: (seq, received ns, linear, angular) rows,
    each taken 0.1 ms after its arrival."""
    lines = [HEADER]
    for seq, received, v, w in rows:
        kind, s = ("twist_stamped", seq) if stamped else ("twist", -1)
        stamp = received - 4_000_000 if stamped else 0
        lines.append(f"{received},{kind},{s},{stamp},{v!r},{w!r},{received + 100_000}")
    (trial / BASE_DIR).mkdir(exist_ok=True)
    (trial / BASE_DIR / BASE_COMMANDS_FILE).write_text("\n".join(lines) + "\n")


def mark_lab(trial) -> None:
    path = trial / "trial.yaml"
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("outcome", {})["lab"] = {"robot_recording": {"end": "stopped"}}
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture
def trial(tmp_path):
    synthesize(tmp_path / "t", SynthSpec(plan=PLAN, latency_s=LATENCY_S))
    return tmp_path / "t"


def analyzed(trial) -> tuple[BaseReceived | None, str]:
    metrics = analyze_trial(trial, plots=False)
    return metrics.base, (trial / "analysis" / "report.md").read_text()


def as_received(trial, delay_s: float = 0.007):
    return [(seq, sent + round(delay_s * 1e9), v, w) for seq, sent, v, w in sent_commands(trial)]


@pytest.mark.parametrize("delay_s", [0.002, 0.02, 0.15])
def test_every_command_received_unchanged_gives_counts_and_lateness(trial, delay_s):
    write_record(trial, as_received(trial, delay_s))
    base, report = analyzed(trial)
    n = len(sent_commands(trial))
    assert base.available and base.source.startswith("simulated base's record")
    assert (base.sent, base.received, base.missing, base.reordered) == (n, n, 0, 0)
    assert base.values_changed == base.zeroed == base.duplicates == 0
    assert base.lateness_ms.median == pytest.approx(delay_s * 1e3, abs=0.01)
    assert base.warnings == [] and "## What the base received" in report


def test_missing_reordered_changed_and_zeroed_commands_are_counted(trial):
    rows = as_received(trial)
    moving = [i for i, (_, _, v, w) in enumerate(rows) if v or w]
    lost = set(moving[5:8])
    rows[moving[10]], rows[moving[11]] = rows[moving[11]], rows[moving[10]]  # arrive swapped
    seq, t, v, w = rows[moving[20]]
    rows[moving[20]] = (seq, t, 0.0, 0.0)  # zeroed on the way
    seq, t, v, w = rows[moving[30]]
    rows[moving[30]] = (seq, t, v * 0.5, w * 0.5)  # another value
    rows = [r for i, r in enumerate(rows) if i not in lost]
    write_record(trial, rows)
    base, report = analyzed(trial)
    assert base.missing == 3 and base.reordered == 1
    assert base.values_changed == 2 and base.zeroed == 1
    assert "2 commands reached the base with other values than sent" in base.warnings
    assert "| missing | 3 |" in report


@pytest.mark.parametrize("share", [0.2, 0.5])
def test_a_base_that_got_fewer_than_sent_is_a_warning(trial, share):
    rows = as_received(trial)
    keep = rows[: int(len(rows) * (1 - share))]
    write_record(trial, keep, stamped=False)  # a Twist: no sequence number, compared in order
    base, report = analyzed(trial)
    assert base.matched_by.startswith("arrival order") and base.missing is None
    assert share > MISSING_WARNING_SHARE
    (warning,) = [w for w in base.warnings if "missing" in w]
    assert f"received {len(keep)} of the {len(rows)} commands" in warning
    assert warning in report


def test_a_base_that_received_nothing_is_the_robot_standing_still(trial):
    write_record(trial, [])
    base, report = analyzed(trial)
    assert base.received == 0
    assert base.warnings == [
        f"the base received none of the {len(sent_commands(trial))} commands the host sent: the robot stood still"
    ]
    metrics = yaml.safe_load((trial / "analysis" / "metrics.json").read_text())
    assert base.warnings[0] in metrics["warnings"] and base.warnings[0] in report


def test_a_lab_trial_without_a_base_record_says_not_available_and_what_stands_in(trial):
    mark_lab(trial)
    base, report = analyzed(trial)
    assert not base.available and "real Create 3 keeps no record" in base.instead
    assert "Not available: no record of what the base received" in report


def test_a_twin_trial_compares_the_robots_receipts(trial):
    base, _ = analyzed(trial)
    assert base.available and base.source.startswith("twin robot's receipts")
    assert base.missing == 0 and base.lateness_ms.median == pytest.approx(LATENCY_S * 1e3, abs=0.01)


def test_a_rehearsal_adds_the_base_record_and_the_analysis_follows(trial, tmp_path):
    analyze_trial(trial, plots=False)
    record = tmp_path / "base_commands.csv"
    write_record(trial, [])
    (trial / BASE_DIR / BASE_COMMANDS_FILE).rename(record)
    assert add_base_record(trial, record)
    metrics = yaml.safe_load((trial / "analysis" / "metrics.json").read_text())
    assert metrics["base"]["received"] == 0 and metrics["base"]["warnings"]
    assert not add_base_record(tmp_path / "no-trial", record)


def test_a_dry_run_base_that_received_nothing_is_no_warning(trial):
    path = trial / "trial.yaml"
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("outcome", {})["lab"] = {"dry_run": True}
    path.write_text(yaml.safe_dump(doc))
    write_record(trial, [])
    base, _ = analyzed(trial)
    assert base.received == 0 and base.warnings == [] and base.note.startswith("dry run")


def test_a_base_record_keeps_its_take_times_and_drops_a_cut_last_line(tmp_path):
    """Each line's take time (taken_ns, last); a record from before the column reads as taken on
    arrival; a last line without its line end (the base killed mid-write) is left out, even where
    its cut leaves as many fields as a line of the older record."""
    path = tmp_path / "commands.csv"
    path.write_text(f"{HEADER}\n5,twist_stamped,0,1,0.1,0.0,7\n9,twist_stamped,1,2,0.1,0.0")
    got = read_base_commands(path)
    assert list(got.seq) == [0] and got.taken_ns is not None and list(got.taken_ns) == [7]
    older = HEADER.removesuffix(",taken_ns")
    path.write_text(f"{older}\n5,twist_stamped,0,1,0.1,0.0\n9,twist_stamped,1,2,0.1,0.0\n")
    got = read_base_commands(path)
    assert got.taken_ns is not None and list(got.taken_ns) == list(got.received_ns) == [5, 9]
