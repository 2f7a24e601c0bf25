"""The pre-flight's robot-link check: probes both ways, and the robot's command subscription matched
to a publisher before the go (a command sent before that match is lost on a reliable link too)."""

from __future__ import annotations

import pytest

from fieldtest.labrun.nodelogic.create3params import pending_report
from fieldtest.labrun.orchestration.labrunner import command_publisher_expected
from fieldtest.labrun.orchestration.preflight import check_robot_link, summarize, with_gate

HOST = {"probes_answered": 4, "last_probe_age_s": 0.3}
ROBOT = {"probes_completed": 3}


def test_probes_both_ways_are_not_enough_while_the_command_subscription_is_unmatched():
    result = check_robot_link(HOST, {**ROBOT, "command_publishers": 0})
    assert result.severity == "fail"
    assert "has not matched a publisher of the commands" in result.detail


def test_a_matched_command_subscription_passes():
    result = check_robot_link(HOST, {**ROBOT, "command_publishers": 1})
    assert result.ok and result.detail.endswith("command subscription matched")


def test_a_robot_that_cannot_tell_passes_and_says_so():
    """A link monitor whose transport (or rclpy) has no matched-publisher count: the probes decide."""
    result = check_robot_link(HOST, {**ROBOT, "command_publishers": None})
    assert result.ok and "not observable" in result.detail


def test_where_the_publisher_comes_with_the_first_command_the_go_does_not_wait_for_it():
    result = check_robot_link(HOST, {**ROBOT, "command_publishers": 0}, command_publisher_expected=False)
    assert result.ok and "comes with the first command" in result.detail


@pytest.mark.parametrize(
    "middleware, inject, expected",
    [("dds", "false", True), ("zenoh-peer", "false", True), ("mqtt-local-broker", "false", True),
     ("mqtt-local-broker", "true", False)],
)  # fmt: skip
def test_mqtt_with_the_senders_timestamp_has_no_command_publisher_before_the_first_command(
    middleware, inject, expected
):
    """mqtt_client without a fixed ros_type (the sender's timestamp needs its type announcement)
    creates its ROS publisher when the first message brings that announcement."""
    args = {"middleware": middleware, "mqtt_inject_timestamp": inject, "ros_distro": "jazzy"}
    assert command_publisher_expected(args) is expected


GATE_WAIT = "waiting 10 s for /_do_not_use/motion_control/get_parameters to answer safety_override"


@pytest.mark.parametrize("report", [None, pending_report(GATE_WAIT)], ids=["no-report", "pending"])
def test_a_pre_flight_that_ends_while_the_create3_gate_runs_names_the_gate_not_the_link(report):
    """The robot's nodes start after its Create 3 gate: with no probe yet, the first failure is the gate."""
    link = check_robot_link({"probes_answered": 0, "last_probe_age_s": None}, None)
    go, checks = summarize(with_gate([link], report, gated=True))
    failed = next(c for c in checks if not c.ok)
    assert not go and failed.check == "create3", checks
    assert "Create 3 gate (create3_preflight" in failed.detail
    if report is not None:
        assert GATE_WAIT in failed.detail


def test_without_a_gate_a_missing_link_is_the_cause():
    link = check_robot_link({"probes_answered": 0, "last_probe_age_s": None}, None)
    _, checks = summarize(with_gate([link], None, gated=False))
    assert next(c for c in checks if not c.ok).check == "robot-link", checks


def test_a_finished_gate_leaves_the_link_first():
    report = {"go": True, "findings": [{"check": "speed cap", "severity": "ok", "detail": "cap 0.46"}]}
    link = check_robot_link({"probes_answered": 0, "last_probe_age_s": None}, None)
    _, checks = summarize(with_gate([link], report, gated=True))
    assert [c.check for c in checks] == ["robot-link", "create3"], checks


def test_a_link_up_without_a_gate_report_keeps_the_link_first():
    """A robot side with no gate (a stand-in) and a link that works: nothing to blame on a gate."""
    link = check_robot_link(HOST, {**ROBOT, "command_publishers": 1})
    _, checks = summarize(with_gate([link], None, gated=True), warn_only=["create3", "battery"])
    assert [c.check for c in checks] == ["robot-link", "create3", "battery"], checks
