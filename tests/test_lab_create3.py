"""Create 3 parameter file and the pre-flight judgement of the base's parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fieldtest.labrun.cli import lab_main
from fieldtest.labrun.nodelogic.create3params import (
    Create3ParamError,
    battery_finding,
    check_create3,
    create3_base_namespace,
    create3_param_file,
    format_findings,
    motion_control_node,
    parse_param_dump,
    preflight_report,
    verdict,
)
from fieldtest.labrun.orchestration.launchplan import launch_plan
from fieldtest.plan import SquarePlan

ROOT = Path(__file__).resolve().parents[1]
SEED = SquarePlan()


def _severity(findings, check):
    return next(f.severity for f in findings if f.check == check)


def test_shipped_parameter_file_is_the_generated_one_and_sets_what_the_plan_needs():
    shipped = ROOT / "robot_ws/src/fieldtest_robot/config/create3_params.yaml"
    assert shipped.read_text() == create3_param_file()
    params = parse_param_dump(shipped.read_text(), str(shipped))
    assert params == {"safety_override": "full", "reflexes_enabled": False}
    findings = check_create3(params, SEED)
    assert all(f.severity == "ok" for f in findings if f.check != "watchdog")
    # the stop-on-silence timeout is no documented parameter to set: unknown until read or measured
    assert _severity(findings, "watchdog") == "warn"


@pytest.mark.parametrize(
    ("robot_ns", "distro", "server", "expected"),
    [
        ("", "humble", False, ""),
        ("/tb4", "humble", False, "/tb4"),
        ("tb4/", "humble", False, "/tb4"),
        ("/tb4", "humble", True, "/tb4/_do_not_use"),  # Humble discovery-server mode
        ("", "jazzy", False, "/_do_not_use"),
        ("/tb4", "jazzy", False, "/tb4/_do_not_use"),
        ("/tb4", "jazzy", True, "/tb4/_do_not_use"),
    ],
)
def test_the_base_namespace_follows_the_turtlebot4_layout(robot_ns, distro, server, expected):
    assert create3_base_namespace(robot_ns, distro, discovery_server=server) == expected
    relative = motion_control_node(distro, discovery_server=server)
    assert f"/{robot_ns.strip('/')}/{relative}".replace("//", "/") == f"{expected}/motion_control"


def test_later_distros_keep_the_jazzy_layout():
    assert create3_base_namespace("/tb4", "kilted") == "/tb4/_do_not_use"
    assert motion_control_node("Humble") == "motion_control"


@pytest.mark.parametrize(
    ("distro", "environ", "args", "expected"),
    [
        ("humble", {}, {}, "/tb4/motion_control"),
        ("jazzy", {}, {}, "/tb4/_do_not_use/motion_control"),
        ("humble", {"ROS_DISCOVERY_SERVER": "127.0.0.1:11811;"}, {}, "/tb4/_do_not_use/motion_control"),
        ("humble", {"ROS_DISCOVERY_SERVER": '" ;"'}, {}, "/tb4/motion_control"),  # blank, as setup.bash ships
        ("jazzy", {}, {"base_namespace": "/base"}, "/base/motion_control"),
    ],
)
def test_robot_preflight_asks_the_base_where_it_lives(distro, environ, args, expected):
    """The pre-flight gate reads the parameters from the base's own motion_control node: on Jazzy
    create3_republisher relays no parameter services, so <ns>/motion_control does not exist."""
    plan = launch_plan({"namespace": "/tb4", "ros_distro": distro, **args}, "robot", environ=environ)
    assert plan.gate is not None and plan.gate.namespace == "/tb4"
    assert plan.gate.parameters["motion_control"] == expected


def test_jazzy_param_dump_of_the_hidden_base_is_read():
    dump = "/tb4/_do_not_use/motion_control:\n  ros__parameters:\n    safety_override: full\n"
    assert parse_param_dump(dump)["safety_override"] == "full"


def test_default_safety_override_clamps_the_seed_studys_speed():
    findings = check_create3({"safety_override": "none", "reflexes_enabled": True}, SEED)
    assert _severity(findings, "speed cap") == "fail"
    detail = next(f.detail for f in findings if f.check == "speed cap")
    assert "clamped to 0.306 m/s" in detail and "0.918 m, not 0.990 m" in detail
    assert _severity(findings, "reflexes") == "warn"
    assert _severity(check_create3({"safety_override": "backup_only"}, SEED), "speed cap") == "fail"
    slow = SquarePlan(linear_speed_mps=0.3)
    assert _severity(check_create3({"safety_override": "none"}, slow), "speed cap") == "ok"


def test_unreadable_or_odd_parameters_fail():
    assert _severity(check_create3({}, SEED), "speed cap") == "fail"
    assert _severity(check_create3({"safety_override": "fully"}, SEED), "speed cap") == "fail"


def test_watchdog_shorter_than_a_few_command_periods_warns():
    ok = check_create3({"safety_override": "full", "wheels_stop_threshold_sec": 0.5}, SEED)
    assert _severity(ok, "watchdog") == "ok"
    short = check_create3({"safety_override": "full", "wheels_stop_threshold_sec": 0.1}, SEED)
    assert _severity(short, "watchdog") == "warn"
    unknown = next(f for f in check_create3({"safety_override": "full"}, SEED) if f.check == "watchdog")
    assert unknown.severity == "warn" and "unknown" in unknown.detail


def test_param_dump_with_namespace_and_errors():
    dump = "/tb4/motion_control:\n  ros__parameters:\n    safety_override: full\n    reflexes_enabled: false\n    use_sim_time: false\n"
    assert parse_param_dump(dump)["safety_override"] == "full"
    with pytest.raises(Create3ParamError, match="no motion_control parameters"):
        parse_param_dump("/tb4/other:\n  ros__parameters: {a: 1}\n")
    with pytest.raises(Create3ParamError, match="not valid YAML"):
        parse_param_dump("a: [\n")


def test_battery_and_report():
    assert battery_finding(0.25, 30).severity == "fail"
    assert battery_finding(0.8, 30).severity == "ok"
    assert battery_finding(float("nan"), 30).severity == "fail"
    report = preflight_report({"safety_override": "none"}, SEED, 0.9, min_battery_percent=30)
    assert report["go"] is False
    warned = preflight_report({"safety_override": "none"}, SEED, 0.9, min_battery_percent=30, warn_only=True)
    assert warned["go"] is True and any(f["severity"] == "warn" for f in warned["findings"])
    assert format_findings(warned["findings"])[0].startswith("[WARN] speed cap:")
    go, _ = verdict(check_create3({"safety_override": "full"}, SEED))
    assert go


def test_cli_check_create3(tmp_path, capsys):
    dump = tmp_path / "dump.yaml"
    dump.write_text("/motion_control:\n  ros__parameters: {safety_override: none, reflexes_enabled: false}\n")
    assert lab_main(["check-create3", str(dump)]) == 1
    assert "[FAIL] speed cap" in capsys.readouterr().out
    assert lab_main(["create3-params", "--namespace", "/tb4"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["/**/motion_control"]["ros__parameters"]["safety_override"] == "full"
    assert "/tb4/motion_control (Humble)" in out and "/tb4/_do_not_use/motion_control (Jazzy)" in out


# --------------------------------------------------------------- stop on silence (first-day step)


def _drive_then_silence(watchdog_s: float, cmd_hz: float, odom_hz: float, phase: float, speed: float = 0.2):
    """The kit's Create 3 model with a given timeout: commands for 2 s, then none; odometry sampled."""
    from fieldtest.twin.create3model import Create3Model

    model = Create3Model("full", watchdog_s=watchdog_s)
    commands = [(i / cmd_hz, speed) for i in range(int(2.0 * cmd_hz))]
    samples = [phase / odom_hz + k / odom_hz for k in range(int(4.0 * odom_hz))]
    events = sorted([(t, "cmd") for t, _ in commands] + [(t, "odom") for t in samples])
    odom = []
    for t, kind in events:
        model.advance_to(t)
        if kind == "cmd":
            model.set_command(speed, 0.0, t)
        else:
            odom.append((t, model.velocity()[0]))
    return commands, odom


@pytest.mark.parametrize("watchdog_s", [0.2, 0.5, 1.0])
@pytest.mark.parametrize(("cmd_hz", "odom_hz"), [(20.0, 20.0), (10.0, 20.0), (30.0, 62.5)])
@pytest.mark.parametrize("phase", [0.0, 0.37, 0.81])
def test_measured_stop_brackets_the_bases_timeout(watchdog_s, cmd_hz, odom_hz, phase):
    from fieldtest.labrun.nodelogic.create3params import measure_stop_after_silence

    m = measure_stop_after_silence(*_drive_then_silence(watchdog_s, cmd_hz, odom_hz, phase))
    assert m.timeout_from_s - 1e-9 <= watchdog_s <= m.timeout_to_s
    assert m.timeout_to_s - m.timeout_from_s <= 1.0 / odom_hz + 0.012  # one sample + the unseen ramp
    assert m.stopped_s is not None and m.stopped_s >= watchdog_s + 0.2 / 0.9 - 1.0 / odom_hz
    assert m.odom_period_s == pytest.approx(1.0 / odom_hz)


def test_stop_measurement_refuses_recordings_it_cannot_read():
    from fieldtest.labrun.nodelogic.create3params import measure_stop_after_silence

    commands, odom = _drive_then_silence(0.5, 20.0, 20.0, 0.0)
    with pytest.raises(Create3ParamError, match="end with zeros"):
        measure_stop_after_silence([*commands, (commands[-1][0] + 0.05, 0.0)], odom)
    with pytest.raises(Create3ParamError, match="no motion command"):
        measure_stop_after_silence([(0.0, 0.0)], odom)
    with pytest.raises(Create3ParamError, match="odometry does not show"):
        measure_stop_after_silence(commands, [(t, 0.0) for t, _ in odom])


def test_cli_measure_stop_reads_a_ros2_bag(tmp_path, capsys):
    from rosbags.rosbag2 import Writer

    from fieldtest import rosmsg

    commands, odom = _drive_then_silence(0.5, 20.0, 20.0, 0.5)
    store = rosmsg.typestore()
    twist_stamped = store.types[rosmsg.TWIST_STAMPED]
    header = store.types["std_msgs/msg/Header"]
    odometry = store.types[rosmsg.ODOMETRY]
    bag = tmp_path / "bag"
    with Writer(bag, version=9) as writer:
        cmd = writer.add_connection("/tb4/cmd_vel", rosmsg.TWIST_STAMPED, typestore=store)
        od = writer.add_connection("/tb4/odom", rosmsg.ODOMETRY, typestore=store)
        for t, v in commands:
            msg = twist_stamped(
                header=header(stamp=rosmsg.time_msg(0), frame_id=""), twist=rosmsg.twist(v, 0.0)
            )
            writer.write(cmd, int(t * 1e9), store.serialize_cdr(msg, rosmsg.TWIST_STAMPED))
        for t, v in odom:
            msg = odometry(
                header=header(stamp=rosmsg.time_msg(0), frame_id="odom"),
                child_frame_id="base_link",
                pose=store.types["geometry_msgs/msg/PoseWithCovariance"](
                    pose=store.types["geometry_msgs/msg/Pose"](
                        position=store.types["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
                        orientation=store.types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
                    ),
                    covariance=np.zeros(36),
                ),
                twist=store.types["geometry_msgs/msg/TwistWithCovariance"](
                    twist=rosmsg.twist(v, 0.0), covariance=np.zeros(36)
                ),
            )
            writer.write(od, int(t * 1e9), store.serialize_cdr(msg, rosmsg.ODOMETRY))
    assert lab_main(["measure-stop", str(bag), "--namespace", "/tb4"]) == 0
    out = capsys.readouterr().out
    assert "started to stop after 0.464-0.525 s" in out and "stood still after 0.725 s" in out
    assert lab_main(["measure-stop", str(bag), "--odom-topic", "wheel_vels"]) == 2


@pytest.mark.parametrize("watchdog_s", [0.2, 0.5, 1.0])
@pytest.mark.parametrize("noise", [False, True])
def test_a_recording_that_ends_before_the_base_stood_still_is_refused(watchdog_s, noise):
    """The guide's old procedure stopped the recorder right after `ros2 topic pub --times` exited
    (0.1 s after the last command); one odometry dip there made a figure of it."""
    from fieldtest.labrun.nodelogic.create3params import measure_stop_after_silence

    commands, odom = _drive_then_silence(watchdog_s, 20.0, 20.0, 0.3)
    last = commands[-1][0]
    if noise:
        odom = _with_dip(odom, last + 0.05)
    for ends_after in (0.1, watchdog_s + 0.1):  # before the stop, and while braking
        cut = [(t, v) for t, v in odom if t <= last + ends_after]
        with pytest.raises(Create3ParamError, match="before the base stood still: keep recording"):
            measure_stop_after_silence(commands, cut)


def _with_dip(odom: list[tuple[float, float]], at: float) -> list[tuple[float, float]]:
    """Odometry with one sample 0.03 m/s low near ``at`` (encoder noise), the rest unchanged."""
    nearest = min(range(len(odom)), key=lambda i: abs(odom[i][0] - at))
    t, v = odom[nearest]
    return [*odom[:nearest], (t, v - 0.03), *odom[nearest + 1 :]]


@pytest.mark.parametrize("watchdog_s", [0.5, 1.0])
@pytest.mark.parametrize("dip_after_s", [0.05, 0.2])
def test_an_odometry_dip_that_recovers_is_not_the_stop(watchdog_s, dip_after_s):
    from fieldtest.labrun.nodelogic.create3params import measure_stop_after_silence

    commands, odom = _drive_then_silence(watchdog_s, 20.0, 20.0, 0.3)
    m = measure_stop_after_silence(commands, _with_dip(odom, commands[-1][0] + dip_after_s))
    assert m.timeout_from_s - 1e-9 <= watchdog_s <= m.timeout_to_s


def test_the_guides_stop_measurement_keeps_recording_until_the_base_stopped():
    """Section 5's commands: between `ros2 topic pub` and stopping the recorder, a pause longer
    than a 1 s timeout (twice the 0.5 s of create3_docs h_2_5), the braking ramp and a second."""
    import re
    from pathlib import Path

    from fieldtest.labrun.nodelogic.create3params import CREATE3_WHEEL_ACCEL_MPS2

    guide = (Path(__file__).resolve().parents[1] / "docs" / "lab-guide.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", guide, re.S) if "measure-stop" in b)
    lines = [line.strip() for line in block.splitlines()]
    pub = next(i for i, line in enumerate(lines) if line.startswith("ros2 topic pub"))
    stop = next(i for i, line in enumerate(lines) if line.startswith("kill -INT %1"))
    pauses = [
        float(m.group(1)) for line in lines[pub + 1 : stop] if (m := re.match(r"sleep (\d+(\.\d+)?)", line))
    ]
    assert pauses and sum(pauses) >= 1.0 + 0.2 / CREATE3_WHEEL_ACCEL_MPS2 + 1.0


def test_the_parameter_file_says_where_the_web_server_is():
    """On a TurtleBot 4 the base is on the Pi's USB link; turtlebot4_setup forwards its web server
    to the Pi's port 8080 (conf/webserver.service), not to "the robot's Wi-Fi address"."""
    for namespace in ("", "/tb4"):
        assert "http://<Pi address>:8080" in create3_param_file(namespace)
    guide = (ROOT / "docs" / "lab-guide.md").read_text()
    step = guide[guide.index("2. Create 3 web server") : guide.index("3. Check from the Pi")]
    assert "http://<Pi address>:8080" in step and "webserver" in step
