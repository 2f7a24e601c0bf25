"""A stock TurtleBot 4 on the two machines (fieldtest.testkit.twomachines): the robot's login has
/etc/turtlebot4/setup.bash as turtlebot4_setup installs it (Fast DDS, domain 0, the empty
namespace; fieldtest.labrun.configuration.stockrobot) and the simulated Create 3 runs Fast DDS.

- `fieldtest lab run` reads that setup over ssh before anything starts and refuses, in one line, a
  trial that would not meet it (each mismatch swept here, by changing the robot's file as
  turtlebot4-setup would, or the campaign);
- it refuses a trial whose programs (the Zenoh bridge, mqtt_client) or keystore files the robot
  lacks, naming what is missing and the fix;
- a ssh session lost mid-trial (the robot's Wi-Fi gone for longer than ssh's keepalive) leaves
  nothing running on the robot: its launch stops itself once sshd sees the session gone, the base
  got its stop, and the runner says the session was lost;
- a Ctrl-C while the runner waits for its pre-flight leaves nothing running on the robot either.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from fieldtest.labrun.configuration.stockrobot import SETUP_VARIABLES, STOCK_ROBOTS
from fieldtest.labrun.nodelogic.driver import CONTROL_DIR, GO_FILE
from fieldtest.labrun.orchestration.remote import PID_FILE
from fieldtest.record import read_trial
from fieldtest.testkit import needs

WIFI = {"name": "wifi-no-loss", "extends": "wifi", "loss_pct": 0.0}  # the cut is the only loss


@pytest.fixture(scope="module")
def lab():
    with needs.two_machines(WIFI, distro="jazzy") as machines:  # the stock robot's defaults
        yield machines


@pytest.fixture
def stock(lab):
    """The robot's setup.bash put back to the stock one after the test."""
    yield lab
    lab.robot_setup()


def _output(done) -> str:
    return f"exit {done.returncode}\n{done.stdout[-2500:]}\n{done.stderr[-2500:]}"


def test_the_robots_login_has_the_stock_turtlebot4_setup(lab):
    shown = " ".join(f'{name}="${name}"' for name in SETUP_VARIABLES)
    done = lab.robot(f"source /etc/turtlebot4/setup.bash && echo {shown} && echo $ROS_DISTRO")
    assert done.returncode == 0, _output(done)
    stock = STOCK_ROBOTS["jazzy"].setup
    assert done.stdout.split() == [*(f"{name}={stock[name]}" for name in SETUP_VARIABLES), "jazzy"]
    assert stock["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp" and stock["ROBOT_NAMESPACE"] == ""
    assert not Path("/etc/turtlebot4").exists()  # the host's /etc is untouched


# (the robot's setup.bash changes, the campaign's settings, extra `lab run` arguments, the setting
# the refusal names, the robot's value in it, the trial's in it)
HOST = "{host}"  # the host's address, filled in per lab
MISMATCHES = {
    "robot domain": ({"ROS_DOMAIN_ID": "3"}, {}, (), "ROS_DOMAIN_ID", "3", "domain_id is 0"),
    "robot namespace": ({"ROBOT_NAMESPACE": "/tb4"}, {}, (), "ROBOT_NAMESPACE", "/tb4", "namespace is (empty)"),
    "campaign namespace": ({}, {"namespace": "/tb4"}, (), "ROBOT_NAMESPACE", "(empty)", "namespace is /tb4"),
    "rmw family": ({"RMW_IMPLEMENTATION": "rmw_zenoh_cpp"}, {}, (), "RMW_IMPLEMENTATION", "rmw_zenoh_cpp",
                   "rmw_fastrtps_cpp"),
    # the kit's default CycloneDDS nodes have no discovery-server mode
    "discovery server": ({"ROS_DISCOVERY_SERVER": f"{HOST}:11811"}, {},
                         ("--host-arg=dds=cyclonedds", "--robot-arg=dds=cyclonedds"), "ROS_DISCOVERY_SERVER",
                         f"{HOST}:11811", "rmw_cyclonedds_cpp"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_lab_run_refuses_a_trial_that_would_not_meet_the_robot(stock, case):
    lab = stock
    change, settings, extra, setting, robot_value, trial_value = MISMATCHES[case]
    change = {k: v.format(host=lab.host_address) for k, v in change.items()}
    robot_value = robot_value.format(host=lab.host_address)
    lab.robot_setup(**change)
    campaign = lab.campaign("trials/rehearsal.yaml", **settings)
    runs = f"runs/refused-{case.replace(' ', '-')}"
    done = lab.run(campaign, *extra, runs_dir=runs)
    assert done.returncode == 2, _output(done)
    (line,) = done.stderr.strip().splitlines()
    assert f"does not match the robot's setup: {setting}: the robot's is {robot_value}, " in line, line
    assert trial_value in line, line
    # read over ssh from the robot's own file, before anything started
    assert f"{setting}={robot_value}" in done.stdout, done.stdout
    assert not (lab.host_user.home / runs).exists()
    assert lab.robot_login_processes() == []
    assert not list(lab.robot_user.home.glob("fieldtest/trials/*"))


# (the trial of trials/rehearsal-bridged.yaml, what the robot lacks: a file of the robot's relative to
# its home, hidden for the case, or None; what the refusal names; its fix)
MISSING = {
    "zenoh bridge": ("zenoh-peer-none", "bridge", "zenoh-bridge-ros2dds (not on the robot's PATH)",
                     "sudo apt install zenoh-bridge-ros2dds"),
    "mqtt client": ("mqtt-local-broker-none", "mqtt_client", "mqtt_client (no lib/mqtt_client/mqtt_client in "
                    "the robot's AMENT_PREFIX_PATH)", "sudo apt install ros-jazzy-mqtt-client"),
    # the campaign names a keystore the robot was never given
    "robot keystore": ("zenoh-peer-mtls-acl", None, "~/fieldtest/keystore/tls/ca.pem (the robot's keystore)",
                       "export the robot's share with `fieldtest keys export --for robot`"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISSING))
def test_lab_run_refuses_a_trial_whose_prerequisite_the_robot_lacks(lab, case):
    """Read over ssh from the robot's own PATH, AMENT_PREFIX_PATH and home, before anything starts."""
    trial, hidden, what, fix = MISSING[case]
    programs = {
        "bridge": lab.root / "robot-opt" / "ros" / lab.distro / "bin" / "zenoh-bridge-ros2dds",
        "mqtt_client": lab.root / "robot-opt" / "ros" / lab.distro / "lib" / "mqtt_client" / "mqtt_client",
    }
    assert all(path.is_file() for path in programs.values())  # the apt step's programs
    campaign = lab.campaign("trials/rehearsal-bridged.yaml", keystore="~/fieldtest/keystore")
    runs = f"runs/lacking-{case.replace(' ', '-')}"
    moved = programs[hidden].rename(programs[hidden].with_suffix(".hidden")) if hidden else None
    try:
        done = lab.run(campaign, "--only", trial, runs_dir=runs)
    finally:
        if moved is not None:
            moved.rename(programs[hidden])
    assert done.returncode == 2, _output(done)
    (line,) = done.stderr.strip().splitlines()
    assert f"trial rehearsal-bridged-{trial}-r0 needs on the robot {what}: {fix}" in line, line
    assert not (lab.host_user.home / runs).exists()
    assert lab.robot_login_processes() == []


def _wait_for(condition, what: str, timeout_s: float, running: threading.Thread | None = None, result=None):
    """``condition``'s value once true; a failure with the runner's output if it ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (running is None or running.is_alive()):
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    ended = f": the runner ended: {_output(result['done'])}" if result and "done" in result else ""
    pytest.fail(f"{what} within {timeout_s:g} s{ended}", pytrace=False)


CUT_S = 15.0  # longer than ssh's keepalive gives up (ServerAliveInterval 2 s x 3) and its reconnects


def test_a_lost_ssh_session_leaves_nothing_running_on_the_robot(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    runs = lab.host_user.home / "runs" / "lost-session"
    result = {}

    def run() -> None:  # what the runner says and leaves behind is checked, not the analysis
        result["done"] = lab.run(campaign, "--no-analyze", runs_dir="runs/lost-session")

    running = threading.Thread(target=run)
    running.start()
    _wait_for(
        lambda: list(runs.glob(f"**/{CONTROL_DIR}/{GO_FILE}")), "the runner sent no go", 240, running, result
    )
    _wait_for(lambda: lab.base_status().get("moving"), "the base did not move", 30, running, result)
    lab.topology.schedule_outage(0.0, CUT_S, node="robot")
    running.join(timeout=600)
    done = result["done"]
    report = _output(done)
    stock = STOCK_ROBOTS["jazzy"].setup  # the stock robot passed the setup check
    assert f"robot setup: RMW_IMPLEMENTATION={stock['RMW_IMPLEMENTATION']}, ROS_DOMAIN_ID=0" in done.stdout, (
        report
    )
    (trial,) = [p.parent for p in runs.glob("**/trial.yaml")]
    outcome = read_trial(trial).outcome
    # the runner says what happened: the session was lost, its stop could not reach the robot
    said = " ".join([outcome.end_detail, *outcome.warnings])
    assert "the ssh session to the robot was lost" in said, (said, report)
    # the robot side stopped itself once the link was back and sshd saw the session gone
    left = _wait_for_nothing_left(lab, timeout_s=90)
    assert left == [], (left, report)
    base = lab.base_status()
    assert base["commands"] > 0 and not base["moving"], base


def _wait_for_nothing_left(lab, timeout_s: float) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := lab.robot_login_processes(settle_s=0)) and time.monotonic() < deadline:
        time.sleep(1.0)
    return left


def test_a_ctrl_c_during_the_preflight_leaves_nothing_running_on_the_robot(lab):
    """SIGINT to the lab user's `fieldtest lab run` once the robot's launch has started (its pid file
    written: its gate runs, the nodes that answer the pre-flight come after it): the runner stops,
    says why, and stops the robot's launch over ssh; nothing of the robot login's is left and the
    base never got a motion command (the host's stop burst reaches it when its node was already up
    when the signal came)."""
    campaign = lab.campaign("trials/rehearsal.yaml")
    runs = lab.host_user.home / "runs" / "ctrl-c"
    commands_before = lab.base_status().get("commands", 0)
    result = {}

    def run() -> None:  # stopped before the go: there is nothing to analyze
        result["done"] = lab.run(campaign, "--no-analyze", runs_dir="runs/ctrl-c")

    running = threading.Thread(target=run)
    launch = f"fieldtest/trials/*/{PID_FILE}"
    earlier = set(lab.robot_user.home.glob(launch))  # a pid file an earlier test left is not this launch's
    running.start()
    _wait_for(
        lambda: set(lab.robot_user.home.glob(launch)) - earlier,
        "the robot's launch did not start",
        240,
        running,
        result,
    )
    assert not list(runs.glob(f"**/{CONTROL_DIR}/{GO_FILE}")), "the go came before the signal"
    os.kill(_runner_pid(lab, "runs/ctrl-c"), signal.SIGINT)
    running.join(timeout=120)
    report = _output(result["done"])
    assert result["done"].returncode == 130 and "interrupted by the user (Ctrl-C)" in report, report
    left = _wait_for_nothing_left(lab, timeout_s=30)
    assert left == [], (left, report)
    assert not set(lab.robot_user.home.glob(launch)) - earlier, report  # it ended and took its pid file
    base = lab.base_status()
    since = base.get("commands", 0) - commands_before
    assert base.get("trailing_zero_commands", 0) >= since and not base["moving"], (since, base)


def _runner_pid(lab, runs_dir: str) -> int:
    """The lab user's `fieldtest lab run` writing to ``runs_dir``."""
    found = [
        proc.pid
        for proc in psutil.process_iter(["username", "cmdline"])
        if proc.info["username"] == lab.host_user.name
        and " lab run " in " ".join(proc.info["cmdline"] or [])
        and runs_dir in (proc.info["cmdline"] or [])
    ]
    assert len(found) == 1, found
    return found[0]
