"""True latency in the twin: every twin process reads one clock, so one-way figures are arrival minus
send time on it; the NTP-style estimate (all the lab has) is reported beside them with its error."""

from __future__ import annotations

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial, read_metrics
from fieldtest.machine import describe
from fieldtest.netem import profiles
from fieldtest.netem.disturbance import probe_allowance
from fieldtest.plan import SquarePlan
from fieldtest.record import RECEIPTS_TOPIC, TrialRecord, TrialRequest, read_bag, read_trial
from fieldtest.runner import run_twin_trial
from fieldtest.testkit import needs

PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5)
# Strongly asymmetric and without jitter, so the NTP-style error, half the asymmetry (14 ms), stands
# far above the emulator's own error (under 1 ms, docs/networks.md).
SLOW_UP = {"up": {"delay_ms": 30.0}, "down": {"delay_ms": 2.0}}
SLOW_DOWN = {"up": {"delay_ms": 2.0}, "down": {"delay_ms": 30.0}}
# the forwarder's and the transports' own delay, with margin; what the machine adds to it in the
# same trial (the forwarder's lateness, each process's wake-up) comes on top
EMULATOR_ERROR_MS = 1.5


@pytest.mark.parametrize(
    ("middleware", "fields"),
    [("dds", SLOW_UP), ("mqtt-local-broker", SLOW_DOWN)],
    ids=["dds-slow-up", "mqtt-slow-down"],
)
def test_one_way_latency_is_the_shared_clock_difference_on_an_asymmetric_link(
    tmp_path, monkeypatch, middleware, fields
):
    needs.netns()
    monkeypatch.setitem(
        profiles.BUILTIN, "asymmetric", {"description": "test link", "source": "test", **fields}
    )
    request = TrialRequest(
        name=f"asym-{middleware}",
        plan=PLAN,
        network="asymmetric",
        topology="robot-only",  # the host wired: host to robot is the profile's down, back its up
        # without Nagle's wait, so the probes' error is the path's asymmetry alone
        transport={"middleware": middleware, "mqtt_nagle": False},
        twin={"robot_clock_offset_s": 0.75},  # a robot clock shifted from the host's: still one clock
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    record = read_trial(result.trial_dir)
    assert record.outcome.clocks == "shared"
    assert set(record.outcome.clock_bases_ns) == {"host", "robot"}
    assert record.shared_clock_offset_s() == pytest.approx(-0.75, abs=1e-3)

    # send-to-arrival on the shared clock, straight from the bags
    receipts = [m for _, m in read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)]
    sent = np.array([r.sent.sec * 10**9 + r.sent.nanosec for r in receipts])
    received = np.array([r.received.sec * 10**9 + r.received.nanosec for r in receipts])
    truth_ms = (received - sent) / 1e6 + record.shared_clock_offset_s() * 1e3
    down_ms = fields["down"]["delay_ms"]
    machine = record.outcome.stack["machine"]
    allowance = probe_allowance(machine, record.outcome.stack["link_forwarder"]["robot"])
    # host to robot: the robot's downlink and the subscriber's wake-up, and a broker's on the way
    command_ms = allowance.ab_ms + (machine["timer_late_p90_ms"] if "broker" in middleware else 0.0)
    why = (allowance, describe(machine))
    assert down_ms <= np.median(truth_ms) < down_ms + EMULATOR_ERROR_MS + command_ms, why

    analyze_trial(result.trial_dir, plots=False)
    latency = read_metrics(result.trial_dir / "analysis" / "metrics.json").latency
    assert latency.clock.method == "shared-clock"
    assert latency.one_way_ms.median == pytest.approx(np.median(truth_ms), abs=0.05)

    ntp = latency.ntp_estimate
    half_asymmetry_ms = (fields["down"]["delay_ms"] - fields["up"]["delay_ms"]) / 2
    # the NTP-style offset is off by half the asymmetry, and the report says so beside the truth
    assert ntp.available and ntp.clock.method == "probes"
    # the machine's delay on either way of a probe shifts the estimate by at most half of it
    probe_ms = EMULATOR_ERROR_MS + allowance.rtt_ms / 2
    assert ntp.median_error_ms == pytest.approx(-half_asymmetry_ms, abs=probe_ms), why
    assert ntp.one_way_ms.median == pytest.approx(
        latency.one_way_ms.median - half_asymmetry_ms, abs=probe_ms
    ), why
    bound = ntp.path_asymmetry
    assert bound.ntp_error_bound_ms == pytest.approx(abs(half_asymmetry_ms), abs=probe_ms), why
    report = (result.trial_dir / "analysis" / "report.md").read_text()
    assert "one-way (shared clock)" in report and "NTP-style offset is off by half the asymmetry" in report


def test_which_clock_a_record_names():
    request = TrialRequest(twin={"robot_clock_offset_s": 0.25})
    lab = TrialRecord(trial_id="t", request=request)  # as the lab runner makes it
    old = TrialRecord.model_validate({"trial_id": "t", "request": {}, "outcome": {}})  # before the field
    assert lab.outcome.clocks == old.outcome.clocks == "separate"
    shared = TrialRecord(
        trial_id="t",
        request=request,
        outcome={"clocks": "shared", "clock_bases_ns": {"host": 10, "robot": 4000}},
    )
    no_bases = TrialRecord(trial_id="t", request=request, outcome={"clocks": "shared"})
    assert lab.shared_clock_offset_s() is None and old.shared_clock_offset_s() is None
    assert shared.shared_clock_offset_s() == pytest.approx(-3990e-9)
    assert no_bases.shared_clock_offset_s() == -0.25
