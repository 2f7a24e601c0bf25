"""The shell set-up the lab runner sends to the robot over ssh (run here with bash, no ssh)."""

from __future__ import annotations

import os
import subprocess

import pytest

from fieldtest.labrun.remote import RobotSide, robot_setup_script


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
