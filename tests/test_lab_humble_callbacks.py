"""The lab nodes under Humble's calling convention: Humble's rclpy calls every subscription callback
with the message only (executors.py ``_execute_subscription``, humble branch), where Jazzy's passes
the message info to a callback that takes two arguments. A whole rehearsal trial runs with every
rclpy process (host driver, link monitor, Create 3 pre-flight, the simulated base and the stand-ins)
calling its callbacks Humble's way (tests/ros/humble_calling_convention on PYTHONPATH, over Jazzy's
rclpy: no Humble rclpy installs here); tests/test_lab_rehearsal.py runs the same trial Jazzy's way,
where the link monitor's arrivals carry the RMW's stamp.

Needs the ROS 2 environment of tools/install_ros.sh, as tests/test_lab_rehearsal.py does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from test_lab_rehearsal import _metrics, _rehearse

from fieldtest.labrun.rehearsal.labrehearsal import ROS_VENV, ros_python
from fieldtest.record import read_trial

HUMBLE_CONVENTION = Path(__file__).parent / "ros" / "humble_calling_convention"

# Which rclpy convention a subscription of the kit's rclpy transport gets in this environment.
CONVENTION_PROBE = r"""
import rclpy
from rclpy.subscription import Subscription
from fieldtest.labrun.nodelogic.rclpy_transport import RclpyTransport
rclpy.init()
node = rclpy.create_node("convention_probe")
RclpyTransport(node, "/convention_probe").subscribe("cmd_vel", "geometry_msgs/msg/TwistStamped", lambda msg: None)
print(next(iter(node.subscriptions))._callback_type.name)
"""


def _humble_environ() -> str:
    return os.pathsep.join(p for p in (str(HUMBLE_CONVENTION), os.environ.get("PYTHONPATH", "")) if p)


@pytest.mark.parametrize("humble", [False, True], ids=["jazzy", "humble"])
def test_the_kits_subscriptions_get_the_message_info_only_where_rclpy_gives_it(humble):
    env = {**os.environ, "PYTHONPATH": _humble_environ()} if humble else None
    done = subprocess.run(
        [ros_python(ROS_VENV), "-c", CONVENTION_PROBE], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == ("MessageOnly" if humble else "WithMessageInfo")


@pytest.mark.parametrize("middleware", ["dds", "mqtt-local-broker"])
def test_a_trial_runs_when_rclpy_calls_every_callback_with_the_message_only(
    tmp_path, monkeypatch, middleware
):
    monkeypatch.setenv("PYTHONPATH", _humble_environ())
    result, base, messages = _rehearse(tmp_path, matrix={"middleware": [middleware]})
    assert result.end_reason == "completed", (result.detail, messages)
    record = read_trial(result.trial_dir)
    plan = record.request.plan
    assert base["commands"] >= plan.n_ticks() and not base["moving"]
    assert _metrics(result.trial_dir)["progress"]["laps_completed"] == plan.laps
    # no message info reached the link monitor: each arrival is its callback's own reading
    arrivals = record.outcome.lab["arrival_stamp"]["arrivals"]
    assert arrivals["rmw_stamp"] == 0 and arrivals["callback"] >= plan.n_ticks(), arrivals
