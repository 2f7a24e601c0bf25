"""The lab pre-flight against the robot's own setup (fieldtest.labrun.orchestration.robotsetup): a
trial whose robot side would not meet the robot described by its /etc/turtlebot4/setup.bash is
refused in one line naming the setting, the robot's value and the trial's. Against real sshd on the
two machines: tests/test_lab_two_machines_stock.py."""

from __future__ import annotations

import pytest

from fieldtest.labrun.configuration.launchsettings import parse_launch_args, with_lab_defaults
from fieldtest.labrun.configuration.stockrobot import SETUP_VARIABLES, STOCK_ROBOTS
from fieldtest.labrun.orchestration.robotsetup import (
    RobotSetupError,
    read_script,
    refuse_unmet_robot,
    setup_mismatch,
    vendor_note,
)
from fieldtest.testkit.twomachines import KIT_ROOT
from fieldtest.trialcampaign import load_trials

STOCK = {name: STOCK_ROBOTS["jazzy"].setup[name] for name in SETUP_VARIABLES}

# (a change to the stock robot's setup, launch arguments of the trial's robot side, the setting
# named, the robot's value and the trial's as the line shows them)
MISMATCHES = {
    "domain": ({"ROS_DOMAIN_ID": "3"}, {}, "ROS_DOMAIN_ID", "3", "domain_id is 0"),
    "robot namespace": ({"ROBOT_NAMESPACE": "/tb4"}, {}, "ROBOT_NAMESPACE", "/tb4", "namespace is (empty)"),
    "trial namespace": ({}, {"namespace": "/tb4"}, "ROBOT_NAMESPACE", "(empty)", "namespace is /tb4"),
    "rmw family": ({"RMW_IMPLEMENTATION": "rmw_zenoh_cpp"}, {}, "RMW_IMPLEMENTATION", "rmw_zenoh_cpp", "rmw_cyclonedds_cpp"),
    "discovery server": (
        {"ROS_DISCOVERY_SERVER": "127.0.0.1:11811"},
        {},
        "ROS_DISCOVERY_SERVER",
        "127.0.0.1:11811",
        "rmw_cyclonedds_cpp",
    ),
}  # fmt: skip


def _cfg(robot: dict[str, str], **args: str):
    return parse_launch_args({"ros_distro": "jazzy", **args}, "robot", environ=robot)


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_a_trial_that_would_not_meet_the_robot_is_refused_in_one_line(case):
    change, args, setting, robot_value, trial_value = MISMATCHES[case]
    robot = {**STOCK, **change}
    why = setup_mismatch(_cfg(robot, **args), robot)
    assert why.startswith(f"{setting}: the robot's is {robot_value}, "), why
    assert trial_value in why and "\n" not in why, why
    assert "turtlebot4-setup" in why  # and where to change the robot's side


@pytest.mark.parametrize(
    ("change", "args"),
    [
        ({}, {}),  # the stock robot and the kit's defaults: CycloneDDS nodes meet a Fast DDS base
        ({}, {"dds": "fastrtps"}),
        ({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, {}),
        ({"RMW_IMPLEMENTATION": ""}, {}),  # unset: ROS 2's default RMW
        ({"ROS_DISCOVERY_SERVER": "127.0.0.1:11811"}, {"dds": "fastrtps"}),
        ({"ROBOT_NAMESPACE": "tb4/"}, {"namespace": "/tb4"}),  # one namespace, spelled two ways
        ({"ROS_DOMAIN_ID": ""}, {}),  # unset: domain 0
        ({"RMW_IMPLEMENTATION": "rmw_zenoh_cpp"}, {"dry_run": "true"}),  # drives nothing
    ],
)
def test_a_trial_that_meets_the_robot_passes(change, args):
    robot = {**STOCK, **change}
    assert setup_mismatch(_cfg(robot, **args), robot) == ""


def test_the_campaign_check_names_the_first_unmet_trial():
    _, trials = load_trials(KIT_ROOT / "trials" / "seed-study.yaml", ros_distro="jazzy")
    trials = [with_lab_defaults(t) for t in trials]
    notes = refuse_unmet_robot(
        trials, "jazzy", {"relay": "true"}, STOCK
    )  # the shipped campaign: the stock robot
    assert notes == [
        vendor_note(_cfg(STOCK), STOCK)
    ]  # its CycloneDDS nodes beside the Fast DDS robot, said once
    with pytest.raises(RobotSetupError, match=rf"^trial {trials[0].name} does not match .* ROS_DOMAIN_ID: "):
        refuse_unmet_robot(trials, "jazzy", {"relay": "true"}, {**STOCK, "ROS_DOMAIN_ID": "7"})


def test_the_read_sources_the_robots_setup_first_and_marks_each_variable():
    script = read_script("source /etc/turtlebot4/setup.bash")
    assert script.startswith("source /etc/turtlebot4/setup.bash && ")
    assert all(f'"${{{name}-}}"' in script for name in SETUP_VARIABLES)


def test_a_robot_on_the_other_dds_vendor_is_met_with_the_measured_why():
    """The stock robot (Fast DDS) and the kit's default nodes (CycloneDDS): not refused, since topics
    cross the two vendors, but noted in one line, since a service does not (tests/test_mixed_vendors.py
    measures both)."""
    cfg = _cfg(STOCK)
    assert setup_mismatch(cfg, STOCK) == ""
    note = vendor_note(cfg, STOCK)
    assert note.startswith(
        "RMW_IMPLEMENTATION: the robot's is rmw_fastrtps_cpp, the trial's robot nodes run rmw_cyclonedds_cpp: "
    ), note
    assert "meet on topics" in note and "service request" in note and "\n" not in note
    assert note.endswith("run on rmw_fastrtps_cpp")
    assert vendor_note(_cfg(STOCK, dds="fastrtps"), STOCK) == ""
    assert vendor_note(cfg, {**STOCK, "RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}) == ""
