"""Small checks of the lab nodes and the kit under the real ROS 2 environment (.venv-ros: rclpy and
the message packages from the ROS 2 wheels, fieldtest_msgs built from host_ws). Fails without it."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

from fieldtest.labrun.rehearsal.labrehearsal import ROS_VENV, ros_python


@pytest.fixture(scope="module")
def python() -> str:
    try:
        return ros_python(ROS_VENV)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def _run(python: str, code: str) -> str:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_what_the_lab_nodes_and_planrun_import_loads_in_the_ros_environment(python):
    """The ROS 2 environment has rclpy on Fast DDS but not the CycloneDDS binding: the modules the
    nodes and planrun import must not need it."""
    modules = [
        "fieldtest.labrun.orchestration.planrun", "fieldtest_host.square_driver", "fieldtest_host.mocap_relay",
        "fieldtest_robot.link_monitor", "fieldtest_robot.create3_preflight", "fieldtest.labrun.rehearsal.simbase",
    ]  # fmt: skip
    assert _run(python, f"import {', '.join(modules)}; print('ok')") == "ok"


def test_launch_plans_find_the_distro_without_ros_distro_set(python):
    code = "import os; os.environ.pop('ROS_DISTRO', None); from fieldtest.labrun.configuration.launchsettings import detect_distro; print(detect_distro())"
    assert _run(python, code) == "jazzy"


def test_fieldtest_msgs_built_by_rosidl_match_the_kits_definitions(python):
    """The generated message classes have the fields, in order, that the kit's .msg files declare."""
    code = (
        "import json, importlib; from fieldtest import rosmsg; out = {}\n"
        "for name in rosmsg.custom_msg_definitions():\n"
        "    pkg, _, cls = name.split('/')\n"
        "    gen = getattr(importlib.import_module(pkg + '.msg'), cls)\n"
        "    out[name] = [list(gen.get_fields_and_field_types()), list(rosmsg.msg_class(name).__dataclass_fields__)]\n"
        "print(json.dumps(out))"
    )
    import json

    fields = json.loads(_run(python, code))
    assert fields, "no fieldtest_msgs types"
    for name, (generated, kit) in fields.items():
        assert generated == [f for f in kit if f != "__msgtype__"], name


@pytest.mark.parametrize("axis, expected", [("y", "up axis y"), ("z", "up axis z"), ("Y", "up axis y")])
def test_mocap_relay_takes_a_bare_axis_letter(python, tmp_path, axis, expected):
    """`-p up_axis:=y` (as the docs write it) reaches rcl as a boolean; the relay must still start."""
    argv = [python, "-m", "fieldtest_host.mocap_relay", "--ros-args", "-p", "source:=pose",
            "-p", "topic:=/nobody/pose", "-p", f"up_axis:={axis}", "-p", f"trial_dir:={tmp_path}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60.0
    while (
        proc.poll() is None and not any("recording" in line for line in lines) and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    reader.join(timeout=5)
    out = "".join(lines)
    assert proc.returncode == 0, out[-2000:]
    assert expected in out
