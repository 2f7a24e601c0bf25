"""What the lab launch files start (decided ROS-free), and static checks of the ROS 2 workspaces.

rclpy, launch and colcon cannot be installed here: the nodes and launch files are compiled, their
packages checked for consistency, and every decision they delegate is tested through
``fieldtest.labrun.orchestration.launchplan``.
"""

from __future__ import annotations

import ast
import os
import py_compile
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from fieldtest.catalog import LAB_MIDDLEWARES
from fieldtest.labrun.configuration.launchsettings import LaunchArgError, parse_launch_args
from fieldtest.labrun.orchestration.launch_actions import ARGUMENT_HELP, argument_names
from fieldtest.labrun.orchestration.launchplan import launch_plan
from fieldtest.middleware import registry
from fieldtest.middleware.dds.lab import ros_environment
from fieldtest.names import HOST_ENCLAVE, RECORDER_ENCLAVE
from fieldtest.rosmsg import MSG_DIR
from fieldtest.testkit import needs

ROOT = Path(__file__).resolve().parents[1]
WORKSPACES = {"host": ROOT / "host_ws/src/fieldtest_host", "robot": ROOT / "robot_ws/src/fieldtest_robot"}
MSG_PACKAGES = [ROOT / "host_ws/src/fieldtest_msgs", ROOT / "robot_ws/src/fieldtest_msgs"]
ENV = {"ROS_DISTRO": "humble", "PATH": "/usr/bin:/bin"}
JAZZY = {"ROS_DISTRO": "jazzy", "PATH": "/usr/bin:/bin"}


def _plan(role, tmp_path, **args):
    args.setdefault("trial_dir", str(tmp_path / "trial"))
    return launch_plan({k: str(v) for k, v in args.items()}, role, environ=ENV)


@pytest.mark.parametrize("middleware", LAB_MIDDLEWARES)
@pytest.mark.parametrize("role", ["host", "robot"])
def test_every_middleware_has_a_complete_launch_plan(tmp_path, middleware, role):
    dry = {} if registry.get(middleware).lab_rmw_speaks_dds else {"dry_run": "true"}  # else refused
    plan = _plan(role, tmp_path, middleware=middleware, namespace="/tb4", **dry)
    names = [p.name for p in plan.processes]
    expected = {
        "dds": [],
        "zenoh-peer": ["zenoh_bridge"],
        "zenoh-router": ["zenoh_router", "zenoh_bridge"] if role == "host" else ["zenoh_bridge"],
        "mqtt-local-broker": ["mosquitto", "mqtt_client"] if role == "host" else ["mqtt_client"],
        "mqtt-broker": ["mqtt_client"],
        "rmw-zenoh": ["rmw_zenohd"],
        "fastdds": [],
    }[middleware]
    assert names == [*expected, "ros2bag"]
    (node,) = plan.nodes
    assert (node.package, node.executable, node.namespace) == (
        f"fieldtest_{role}",
        "square_driver" if role == "host" else "link_monitor",
        "/tb4",
    )
    assert (plan.gate is not None) == (role == "robot")
    written = plan.write_files()
    assert all(path.is_file() for path in written)
    assert all(str(path).startswith(str(tmp_path / "trial" / "lab" / "config" / role)) for path in written)
    plan_file = Path(node.parameters["plan"])
    assert yaml.safe_load(plan_file.read_text())["linear_speed_mps"] == 0.33
    assert any(line.startswith(f"{role}: middleware {middleware}") for line in plan.summary())


def test_the_middleware_arguments_help_lists_every_lab_name():
    """``ros2 launch ... --show-args`` names every middleware the launch takes (a new name needs no edit here)."""
    assert ARGUMENT_HELP["middleware"].split(" | ") == list(LAB_MIDDLEWARES)


def test_fastdds_is_plain_dds_on_rmw_fastrtps(tmp_path):
    """The registry's lab-only fastdds: every node on rmw_fastrtps_cpp, DDS across the network,
    SROS2 allowed, no bridge, no CycloneDDS file, the Fast DDS loopback profile on one machine."""
    cfg = parse_launch_args({"middleware": "fastdds", "dds_peers": "10.0.0.20"}, "host", environ=JAZZY)
    env = ros_environment(cfg, "/tmp/cyclone.xml")
    assert env.set["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp"
    assert env.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and env.set["ROS_STATIC_PEERS"] == "10.0.0.20"
    assert env.cyclonedds_xml is None and not registry.get(cfg.middleware).lab_bridged()
    local = ros_environment(
        parse_launch_args({"middleware": "fastdds"}, "host", environ=ENV), None, tmp_path / "f.xml"
    )
    assert "<address>127.0.0.1</address>" in local.fastdds_xml
    secured = parse_launch_args(
        {"middleware": "fastdds", "security": "sros2", "keystore": "/k", "relay": "true"},
        "robot",
        environ=ENV,
    )
    assert ros_environment(secured).set["ROS_SECURITY_ENABLE"] == "true"
    with pytest.raises(LaunchArgError, match="'mtls-acl' does not apply to middleware 'fastdds'"):
        parse_launch_args(
            {"middleware": "fastdds", "security": "mtls-acl", "keystore": "/k"}, "host", environ=ENV
        )


def test_host_waits_for_the_runner_only_when_recording(tmp_path):
    assert _plan("host", tmp_path, middleware="dds").nodes[0].parameters["wait_for_go"] is True
    manual = launch_plan({"middleware": "dds"}, "host", environ=ENV)
    assert manual.nodes[0].parameters["wait_for_go"] is False
    assert [p.name for p in manual.processes] == []  # nothing to record into


def test_security_gives_nodes_their_enclave_only_with_dds(tmp_path):
    dds = _plan("host", tmp_path, middleware="dds", security="sros2", keystore=str(tmp_path), relay="true")
    assert dds.nodes[0].ros_arguments == ["--enclave", HOST_ENCLAVE]
    assert dds.environment.set["ROS_SECURITY_ENABLE"] == "true"
    assert dds.processes[-1].name == "ros2bag"
    assert dds.processes[-1].env == {"ROS_SECURITY_ENCLAVE_OVERRIDE": RECORDER_ENCLAVE}
    relay = _plan("robot", tmp_path, middleware="dds", security="sros2", keystore=str(tmp_path), relay="true")
    assert relay.nodes[0].parameters["base_plain_context"] is True
    # The pre-flight talks to the Create 3 only, which cannot join the secure domain.
    assert relay.gate.ros_arguments == [] and relay.gate.env == {"ROS_SECURITY_ENABLE": "false"}
    # rmw_zenoh takes no enclave (tests/test_security_rmw_zenoh.py); its pre-flight talks DDS to the base
    with pytest.raises(LaunchArgError, match="zenohd.json5: missing; generate"):
        _plan(
            "robot", tmp_path, middleware="rmw-zenoh", security="sros2", keystore=str(tmp_path), dry_run=True
        )
    zenoh = _plan("robot", tmp_path, middleware="rmw-zenoh", dry_run=True)
    assert zenoh.gate.ros_arguments == [] and zenoh.gate.env == {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}
    plain = _plan("robot", tmp_path, middleware="dds", relay="true")
    assert plain.nodes[0].parameters["base_plain_context"] is False
    assert plain.processes[-1].env == {} and plain.gate.env == {}


@pytest.mark.parametrize(("distro", "cmd_type"), [("humble", "twist"), ("jazzy", "twist_stamped")])
def test_each_secure_lab_process_is_granted_the_topics_it_uses(tmp_path, distro, cmd_type):
    """The enclaves' DDS permissions cover what each lab process publishes, takes and records
    (secure DDS always relays: the Create 3 is outside the SROS2 domain)."""
    from fieldtest.middleware.labshared import link_topics, recorded_topics
    from fieldtest.security.policy import dds_grants, kit_enclave

    relay = "true"
    args = {"middleware": "dds", "security": "sros2", "keystore": str(tmp_path), "namespace": "/tb4"}
    args |= {"relay": relay, "cmd_type": cmd_type, "ros_distro": distro}
    for role in ("host", "robot"):
        plan = _plan(role, tmp_path, **args)
        node = dds_grants(kit_enclave(plan.nodes[0].ros_arguments[-1]), "/tb4")
        for link in link_topics(plan.cfg):
            dds_name = "rt/tb4" + link.topic
            rights = node.publish if link.sender == role else node.subscribe
            assert dds_name in rights, (role, link.topic)
        recorder = dds_grants(kit_enclave(plan.processes[-1].env["ROS_SECURITY_ENCLAVE_OVERRIDE"]), "/tb4")
        plain = {"/tb4/cmd_vel"} if role == "robot" and relay == "true" else set()  # the relay's output
        for topic in set(recorded_topics(plan.cfg)) - plain:
            assert "rt" + topic in recorder.subscribe, (role, topic)
        assert (
            "rq/rosbag2_recorder/get_parametersRequest" in recorder.publish
        )  # started without the namespace


def test_robot_preflight_arguments(tmp_path):
    plan = _plan("robot", tmp_path, middleware="dds", preflight_warn_only="true", min_battery_percent="45")
    assert plan.gate.parameters["warn_only"] is True
    assert plan.gate.parameters["min_battery_percent"] == 45.0
    assert plan.gate.parameters["out"].endswith("lab/robot_preflight.json")
    assert _plan("robot", tmp_path, middleware="dds", preflight="false").gate is None
    with pytest.raises(LaunchArgError, match="min_battery_percent"):
        _plan("robot", tmp_path, middleware="dds", min_battery_percent="lots")
    with pytest.raises(LaunchArgError, match="unknown launch argument preflight"):
        launch_plan({"preflight": "false"}, "host", environ=ENV)


def test_launch_arguments_cover_the_issues_list():
    for role in ("host", "robot"):
        assert {"middleware", "security", "qos", "namespace", "plan"} <= set(argument_names(role))
    assert "preflight_warn_only" in argument_names("robot")


# ------------------------------------------------------------------------- static workspace checks


def _python_files():
    return sorted(p for ws in ("host_ws", "robot_ws") for p in (ROOT / ws).rglob("*.py"))


def test_nodes_and_launch_files_compile(tmp_path):
    files = _python_files()
    assert {p.name for p in files} >= {
        "square_driver.py",
        "link_monitor.py",
        "create3_preflight.py",
        "host.launch.py",
        "robot.launch.py",
        "setup.py",
    }
    for path in files:
        py_compile.compile(str(path), cfile=str(tmp_path / (path.name + "c")), doraise=True)


def _entry_points(setup_py: Path) -> dict[str, str]:
    tree = ast.parse(setup_py.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "entry_points":
            scripts = ast.literal_eval(node.value)["console_scripts"]
            return dict(s.replace(" ", "").split("=") for s in scripts)
    raise AssertionError(f"{setup_py}: no entry_points")


@pytest.mark.parametrize("role", ["host", "robot"])
def test_packages_are_consistent(role):
    pkg = WORKSPACES[role]
    name = pkg.name
    manifest = ET.parse(pkg / "package.xml").getroot()
    assert manifest.findtext("name") == name
    assert manifest.find("export/build_type").text == "ament_python"
    deps = {e.text for e in manifest.iter("exec_depend")}
    assert {"rclpy", "launch", "launch_ros", "fieldtest_msgs"} <= deps
    assert (pkg / "resource" / name).is_file()
    assert (pkg / "setup.cfg").read_text().count(f"$base/lib/{name}") == 2
    for script, target in _entry_points(pkg / "setup.py").items():
        module, func = target.split(":")
        source = pkg / (module.replace(".", "/") + ".py")
        tree = ast.parse(source.read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), (
            f"{script} -> {target}"
        )
    launch_files = list((pkg / "launch").glob("*.launch.py"))
    assert launch_files
    for launch in launch_files:
        tree = ast.parse(launch.read_text())
        assert any(
            isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body
        )
        assert f'"{role}"' in launch.read_text()


def _msg_packages_in_repo() -> list[Path]:
    """Every folder of the repository (outside build output and virtualenvs) whose package.xml
    names fieldtest_msgs; symbolic links are not followed, so a link counts once, as itself."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in {"build", "install", "log"}]
        if (
            "package.xml" in filenames
            and "<name>fieldtest_msgs</name>" in (Path(dirpath) / "package.xml").read_text()
        ):
            found.append(Path(dirpath))
    return found


def test_one_message_package_the_robot_workspace_links_to_it():
    """fieldtest_msgs exists once (host_ws); robot_ws/src holds a relative link colcon follows."""
    first, second = MSG_PACKAGES
    assert _msg_packages_in_repo() == [first], "a second copy of fieldtest_msgs: link to host_ws's instead"
    assert second.is_symlink() and not first.is_symlink()
    assert not Path(os.readlink(second)).is_absolute()  # survives moving the clone
    assert second.resolve() == first.resolve() and (second / "CMakeLists.txt").is_file()
    assert not list(first.rglob("*.msg"))  # the messages live in fieldtest/msg only


def test_message_package_reads_fieldtest_msg():
    first = MSG_PACKAGES[0]
    manifest = ET.parse(first / "package.xml").getroot()
    assert manifest.findtext("name") == "fieldtest_msgs"
    assert "rosidl_interface_packages" in {e.text for e in manifest.iter("member_of_group")}
    # every message's dependencies are declared
    used = set()
    for msg in MSG_DIR.glob("*.msg"):
        for line in msg.read_text().splitlines():
            field = line.split("#")[0].split()
            if field and "/" in field[0]:
                used.add(field[0].split("/")[0])
    declared = {e.text for e in manifest.iter("depend")}
    assert used <= declared, used - declared


@pytest.mark.parametrize("package", MSG_PACKAGES, ids=lambda p: p.parent.parent.name)
def test_cmake_glob_finds_exactly_the_kits_msg_files(tmp_path, package):
    """Run the CMakeLists' own glob (everything before rosidl) in CMake script mode."""
    text = (package / "CMakeLists.txt").read_text()
    start, end = text.index("if(NOT FIELDTEST_MSG_ROOT)"), text.index("rosidl_generate_interfaces")
    script = tmp_path / "glob.cmake"
    script.write_text(
        f'set(CMAKE_CURRENT_SOURCE_DIR "{package}")\n'
        + text[start:end]
        + 'foreach(_i ${_fieldtest_interfaces})\n  message(STATUS "IFACE ${_i}")\nendforeach()\n'
    )
    needs.tools("cmake")
    done = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = sorted(
        line.split("IFACE ", 1)[1] for line in (done.stdout + done.stderr).splitlines() if "IFACE " in line
    )
    expected = sorted(f"{MSG_DIR.resolve().parent}:msg/{p.name}" for p in MSG_DIR.glob("*.msg"))
    assert found == expected and len(found) == 4


@pytest.mark.parametrize(
    ("robot_rmw", "args", "gate_env"),
    [
        # a stock TurtleBot 4 (Fast DDS) with the kit's CycloneDDS nodes: the gate asks on Fast DDS
        ("rmw_fastrtps_cpp", {}, {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"}),
        ("rmw_fastrtps_cpp", {"dds": "fastrtps"}, {}),
        ("rmw_cyclonedds_cpp", {}, {}),
        ("", {}, {}),  # no robot setup read: the trial's own
        ("rmw_zenoh_cpp", {}, {}),  # not a DDS: the base is never on it
        (
            "rmw_fastrtps_cpp",
            {"security": "sros2", "relay": "true"},
            {"ROS_SECURITY_ENABLE": "false", "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"},
        ),
        (
            "rmw_fastrtps_cpp",
            {"middleware": "rmw-zenoh", "dry_run": "true"},
            {"RMW_IMPLEMENTATION": "rmw_fastrtps_cpp"},
        ),
    ],
)
def test_the_nodes_facing_the_base_run_on_the_robots_own_dds(tmp_path, robot_rmw, args, gate_env):
    """The Create 3 runs the RMW of the robot's setup.bash (turtlebot4-setup applies it to both):
    a CycloneDDS parameter request is never answered by a Fast DDS base, so the pre-flight gate
    and base_stop take the robot's DDS where the trial's differs."""
    from fieldtest.labrun.orchestration.launchplan import base_stop_node

    if args.get("security") == "sros2":
        args = {**args, "keystore": str(tmp_path)}
    environ = {**JAZZY, **({"RMW_IMPLEMENTATION": robot_rmw} if robot_rmw else {})}
    plan = launch_plan({"trial_dir": str(tmp_path / "trial"), **args}, "robot", environ=environ)
    assert plan.gate.env == gate_env
    assert base_stop_node(plan.cfg, robot_rmw).env == gate_env
    if "RMW_IMPLEMENTATION" in gate_env:
        assert plan.gate.ros_arguments == []  # outside the side's (secure) set-up
