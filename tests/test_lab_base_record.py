"""A rehearsal's trial holds what the simulated base received, and its analysis compares it with what
the host sent: every command, by sequence number (TwistStamped keeps the
host's frame_id through the republisher stand-in). Humble's Twist commands, matched in arrival
order, are not rehearsed (the rehearsal runs Jazzy's rclpy only); tests/test_analysis_basereceived.py
covers that matching.

Needs the ROS 2 environment of tools/install_ros.sh, as tests/test_lab_rehearsal.py does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_lab_rehearsal import _base_lost, _metrics, _sent_seqs

from fieldtest.analysis.loading.trialdata import load_trial
from fieldtest.analysis.metrics.latency import ClockModel
from fieldtest.record import read_trial
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR, read_base_commands


def base_lateness_ms(trial_dir: Path, clock: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each command's first arrival at the base (on the host's clock, by the trial's clock model)
    minus the host's send of the same sequence number; and the base's copy of its send stamp minus
    that send (zero where the base took the host's own command)."""
    record = read_base_commands(trial_dir / BASE_DIR / BASE_COMMANDS_FILE)
    commands = load_trial(trial_dir).commands
    assert commands is not None
    sent = dict(zip(commands.seq.tolist(), commands.sent_ns.tolist(), strict=True))
    seqs, first = np.unique(record.seq, return_index=True)
    sent_ns = np.array([sent[int(s)] for s in seqs], dtype=np.int64)
    model = ClockModel(
        clock["method"], clock["offset_s"], clock["drift_ppm"] / 1e6, clock["reference_robot_ns"]
    )
    late_ms = (model.to_host_ns(record.received_ns[first]) - sent_ns.astype(float)) / 1e6
    return late_ms, record.stamp_ns[first] - sent_ns


def test_the_analysis_compares_what_the_simulated_base_received(real_nodes_rehearsal):
    result, base_status, messages = real_nodes_rehearsal(
        "jazzy", "twist_stamped"
    )  # test_lab_rehearsal's trial
    assert result.end_reason == "completed", (result.detail, messages)
    plan = read_trial(result.trial_dir).request.plan
    record = read_base_commands(result.trial_dir / BASE_DIR / BASE_COMMANDS_FILE)
    # every command the host sent, but for what the base's own stall let its history overwrite
    lost = _base_lost(result.trial_dir, _sent_seqs(result.trial_dir))
    assert len(record.received_ns) == base_status["commands"] >= plan.n_ticks() - lost
    base = _metrics(result.trial_dir)["base"]
    assert base["available"] and base["source"].startswith("simulated base's record")
    assert base["matched_by"].startswith("sequence number") and base["received"] == len(record.received_ns)
    assert base["received_types"] == ["twist_stamped"]
    assert base["warnings"] == [] and base["values_changed"] == 0
    assert base["missing"] == lost and base["reordered"] == 0
    # the lateness is each command's own: its arrival at the base after its send (no speed asserted)
    late_ms, stamp_differs_ns = base_lateness_ms(
        result.trial_dir, _metrics(result.trial_dir)["latency"]["clock"]
    )
    assert not stamp_differs_ns.any()  # the base took the host's commands, each by its sequence number
    assert base["lateness_ms"]["median"] == pytest.approx(float(np.median(late_ms)))
    assert base["lateness_ms"]["max"] == pytest.approx(float(late_ms.max()))
    assert base["lateness_ms"]["median"] > 0.0
    assert "## What the base received" in (result.trial_dir / "analysis" / "report.md").read_text()
