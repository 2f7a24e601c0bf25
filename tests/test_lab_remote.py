"""The shell set-up the lab runner sends to the robot over ssh (run here with bash, no ssh)."""

from __future__ import annotations

import os
import subprocess

import pytest

from fieldtest.labrun.orchestration.remote import RobotSide, robot_setup_script


@pytest.fixture
def fake_ros(tmp_path):
    """/opt/ros/<distro>/setup.bash stand-ins that export ROS_DISTRO, and a built workspace."""
    root = tmp_path / "opt_ros"
    for distro in ("humble", "jazzy"):
        (root / distro).mkdir(parents=True)
        (root / distro / "setup.bash").write_text(f"export ROS_DISTRO={distro}\n")
    ws = tmp_path / "robot_ws" / "install"
    ws.mkdir(parents=True)
    (ws / "setup.bash").write_text("export FIELDTEST_WS=1\n")
    return root, tmp_path / "robot_ws"


def _sourced(script: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DISTRO"}  # as in a non-interactive ssh shell
    done = subprocess.run(
        ["bash", "-c", f'{script} && echo "$ROS_DISTRO $FIELDTEST_WS"'],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_the_campaigns_distro_is_sourced_over_ssh(fake_ros, distro):
    root, ws = fake_ros
    assert _sourced(robot_setup_script(distro, str(ws), str(root))) == f"{distro} 1"


def test_the_default_robot_side_names_a_distro_not_the_login_environment():
    assert "${ROS_DISTRO" not in RobotSide().setup
    with pytest.raises(ValueError, match="rolling"):
        robot_setup_script("rolling")


def test_the_default_remote_root_is_the_robots_home_for_launch_and_scripts_alike(tmp_path, monkeypatch):
    """`fieldtest lab run` without --remote-root: the launch and the runner's start, read and collect
    scripts must all meet in the robot login's $HOME/fieldtest/trials, whatever the working
    directory. A real bash with a HOME of its own runs the scripts and the stand-in launch."""
    import sys

    from fieldtest.labrun.orchestration.labrunner import LabOptions, LabRunner
    from fieldtest.labrun.orchestration.remote import RemoteShell
    from fieldtest.plan import SquarePlan
    from fieldtest.procs import free_port
    from fieldtest.record import RECEIPTS_TOPIC, TrialRequest, read_bag
    from fieldtest.transport.base import TransportConfig
    from fieldtest.trialcampaign import LabSettings

    robot_home, elsewhere = tmp_path / "home-ubuntu", tmp_path / "cwd"
    robot_home.mkdir()
    elsewhere.mkdir()
    monkeypatch.setenv("HOME", str(robot_home))
    monkeypatch.chdir(elsewhere)  # over ssh the launch starts in $HOME: a relative '~' lands there
    standin = (sys.executable, "-m", "fieldtest.labrun.rehearsal.standin")
    robot = RobotSide(shell=RemoteShell(None), setup="", launch=(*standin, "robot"))
    assert robot.remote_root == "~/fieldtest/trials"  # the CLI's default too
    options = LabOptions(
        runs_dir=tmp_path / "runs",
        ros_distro="jazzy",  # a TwistStamped trial: what the Jazzy base takes
        lab=LabSettings(countdown_s=0, warn_only=["create3", "battery", "mocap"], preflight_timeout_s=15),
        robot=robot,
        host_launch=(*standin, "host"),
        analyze=False,
        say=lambda _line: None,
    )
    plan = SquarePlan(
        linear_speed_mps=0.1, side_duration_s=0.5, turn_rate_dps=180.0, laps=1, start_delay_s=0.2
    )
    transport = TransportConfig(middleware="zenoh-peer", zenoh_port=free_port(), namespace="/tb4")
    request = TrialRequest(
        name="home", plan=plan, transport=transport, network="lab", cmd_type="twist_stamped"
    )
    result = LabRunner(options).run_trial(request)
    assert (result.end_reason, result.detail) == ("completed", "")
    on_robot = robot_home / "fieldtest" / "trials" / result.trial_dir.name
    assert (on_robot / "robot_status.json").is_file()
    assert not list(tmp_path.rglob("~")), "a folder literally named '~' was written"
    receipts = read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)
    assert len(receipts) == plan.n_ticks() + 5  # collected from the robot's home
