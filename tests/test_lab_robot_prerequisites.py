"""What a trial needs on the robot besides its setup, read before anything moves: the Zenoh
bridge for a Zenoh trial, mqtt_client for an MQTT trial, the robot's own keystore files for a
secure one. The runner asks the robot's shell (``RobotSide.shell``) through the robot's own
setup; here that shell is bash on this machine (``RemoteShell(None)``, the runner's local mode)
with a robot folder as its PATH, AMENT_PREFIX_PATH and home. Over real sshd on the two machines:
tests/test_lab_two_machines_stock.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fieldtest.labrun.configuration.launchsettings import with_lab_defaults
from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide
from fieldtest.labrun.orchestration.robotsetup import (
    RobotSetupError,
    read_robot,
    refuse_unmet_robot,
    robot_probes,
)
from fieldtest.security.keystore import create_keystore
from fieldtest.security.machineshare import export_machine
from fieldtest.testkit import needs
from fieldtest.testkit.twomachines import KIT_ROOT
from fieldtest.trialcampaign import load_trials

ROBOT_KEYSTORE = "~/fieldtest/keystore"  # as a campaign names it: the robot's home on the robot


@pytest.fixture(autouse=True)
def _installed_tools():
    needs.tools("openssl")


@pytest.fixture
def robot(tmp_path) -> Path:
    """A robot with ROS 2's layout and nothing the trials need installed yet."""
    for folder in ("bin", "opt/lib", "home"):
        (tmp_path / "robot" / folder).mkdir(parents=True)
    return tmp_path / "robot"


def _side(robot: Path) -> RobotSide:
    # the campaign's namespace, as turtlebot4-setup would have set it: only the prerequisites differ
    setup = f"export HOME={robot}/home PATH={robot}/bin:/usr/bin:/bin AMENT_PREFIX_PATH={robot}/opt ROBOT_NAMESPACE=/tb4"
    return RobotSide(shell=RemoteShell(None), setup=setup)


def _trial(name: str):
    _, trials = load_trials(KIT_ROOT / "trials" / "rehearsal-bridged.yaml", ros_distro="jazzy")
    (trial,) = [t for t in trials if t.name.startswith(f"rehearsal-bridged-{name}-")]
    trial = trial.model_copy(
        update={"transport": trial.transport.model_copy(update={"keystore": ROBOT_KEYSTORE})}
    )
    return with_lab_defaults(trial)


def _refusal(robot: Path, name: str) -> str:
    """The runner's check of the trial against the robot: '' or its one-line refusal."""
    trials = [_trial(name)]
    found, held = read_robot(_side(robot), robot_probes(trials, "jazzy", {"relay": "true"}))
    try:
        refuse_unmet_robot(trials, "jazzy", {"relay": "true"}, found, held)
    except RobotSetupError as exc:
        assert "\n" not in str(exc)
        return str(exc)
    return ""


def _install(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def test_a_zenoh_trial_needs_the_bridge_on_the_robots_path(robot):
    refusal = _refusal(robot, "zenoh-peer-none")
    assert refusal.startswith(
        "trial rehearsal-bridged-zenoh-peer-none-r0 needs on the robot zenoh-bridge-ros2dds "
    ), refusal
    assert refusal.endswith("sudo apt install zenoh-bridge-ros2dds (lab guide 3.1)"), refusal
    _install(robot / "bin" / "zenoh-bridge-ros2dds")
    assert _refusal(robot, "zenoh-peer-none") == ""
    assert _refusal(robot, "zenoh-router-none") == ""


def test_an_mqtt_trial_needs_mqtt_client_where_ros2_run_looks(robot):
    refusal = _refusal(robot, "mqtt-local-broker-none")
    assert (
        "needs on the robot mqtt_client (no lib/mqtt_client/mqtt_client in the robot's AMENT_PREFIX_PATH)"
        in refusal
    )
    assert refusal.endswith("sudo apt install ros-jazzy-mqtt-client (lab guide 3.1)"), refusal
    _install(robot / "bin" / "mqtt_client")  # on PATH is not where ros2 run looks
    assert _refusal(robot, "mqtt-local-broker-none") == refusal
    _install(robot / "opt" / "lib" / "mqtt_client" / "mqtt_client")
    assert _refusal(robot, "mqtt-local-broker-none") == ""
    assert _refusal(robot, "mqtt-broker-none") == ""


def test_a_secure_trial_needs_the_robots_own_keys_on_the_robot(robot, tmp_path):
    _install(robot / "bin" / "zenoh-bridge-ros2dds")
    refusal = _refusal(robot, "zenoh-peer-mtls-acl")
    assert "needs on the robot ~/fieldtest/keystore/tls/ca.pem (the robot's keystore): " in refusal, refusal
    assert "fieldtest keys export --for robot" in refusal
    whole = create_keystore(tmp_path / "laptop" / "keystore")
    share = export_machine(whole, "robot", robot / "home" / "fieldtest" / "keystore")
    assert _refusal(robot, "zenoh-peer-mtls-acl") == ""
    assert _refusal(robot, "zenoh-peer-none") == ""  # no keys needed
    (share / "tls" / "robot.key").unlink()
    assert "needs on the robot ~/fieldtest/keystore/tls/robot.key " in _refusal(robot, "zenoh-peer-mtls-acl")
