"""A rehearsal's trial holds what the simulated base received, and its analysis compares it with what
the host sent: every command, by sequence number (TwistStamped keeps the
host's frame_id through the republisher stand-in). Humble's Twist commands, matched in arrival
order, are not rehearsed (the rehearsal runs Jazzy's rclpy only); tests/test_analysis_basereceived.py
covers that matching.

Needs the ROS 2 environment of tools/install_ros.sh, as tests/test_lab_rehearsal.py does."""

from __future__ import annotations

from test_lab_rehearsal import _metrics

from fieldtest.record import read_trial
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR, read_base_commands


def test_the_analysis_compares_what_the_simulated_base_received(real_nodes_rehearsal):
    result, base_status, messages = real_nodes_rehearsal(
        "jazzy", "twist_stamped"
    )  # test_lab_rehearsal's trial
    assert result.end_reason == "completed", (result.detail, messages)
    plan = read_trial(result.trial_dir).request.plan
    record = read_base_commands(result.trial_dir / BASE_DIR / BASE_COMMANDS_FILE)
    assert len(record.received_ns) == base_status["commands"] >= plan.n_ticks()
    base = _metrics(result.trial_dir)["base"]
    assert base["available"] and base["source"].startswith("simulated base's record")
    assert base["matched_by"].startswith("sequence number") and base["received"] == len(record.received_ns)
    assert base["received_types"] == ["twist_stamped"]
    assert base["warnings"] == [] and base["values_changed"] == 0
    assert base["missing"] == 0 and base["reordered"] == 0
    assert 0.0 < base["lateness_ms"]["median"] < 50.0
    assert "## What the base received" in (result.trial_dir / "analysis" / "report.md").read_text()
