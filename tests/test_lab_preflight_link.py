"""The pre-flight's robot-link check: probes both ways, and the robot's command subscription matched
to a publisher before the go (a command sent before that match is lost on a reliable link too)."""

from __future__ import annotations

import pytest

from fieldtest.labrun.orchestration.preflight import check_robot_link
from fieldtest.labrun.orchestration.runner import command_publisher_expected

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
