"""Launch arguments, the RMW environment and CycloneDDS configs of the lab (no ROS needed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.labrun.configuration.launchsettings import (
    LAUNCH_ARGUMENTS,
    LaunchArgError,
    launch_args_for_trial,
    load_plan,
    parse_launch_args,
)
from fieldtest.middleware import registry
from fieldtest.middleware.dds.lab import cyclonedds_xml, ros_environment
from fieldtest.middleware.mqtt.settings import MQTT_TLS_PORT
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.names import ROBOT_TRAFFIC_PRESETS
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.transport.base import TransportConfig

ROOT = Path(__file__).resolve().parents[1]

HUMBLE = {"ROS_DISTRO": "humble"}
JAZZY = {"ROS_DISTRO": "jazzy"}


def test_defaults_follow_the_distro():
    humble = parse_launch_args({}, "host", environ=HUMBLE)
    jazzy = parse_launch_args({}, "host", environ=JAZZY)
    assert (humble.ros_distro, humble.cmd_type) == ("humble", "twist")
    assert (jazzy.ros_distro, jazzy.cmd_type) == ("jazzy", "twist_stamped")
    assert humble.plan == SquarePlan()
    assert (
        parse_launch_args({"security": "sros2", "keystore": "/k", "relay": "true"}, "host", environ=HUMBLE)
        .settings(MqttSettings)
        .port
        == MQTT_TLS_PORT
    )


def test_auto_infrastructure():
    def cfg(role, **args):
        return parse_launch_args(args, role, environ=HUMBLE)

    assert cfg("host", middleware="zenoh-router").start_router
    assert not cfg("robot", middleware="zenoh-router").start_router
    assert not cfg("host", middleware="zenoh-router", router_address="10.0.0.9").start_router
    assert cfg("host", middleware="mqtt-local-broker").start_broker
    assert not cfg("host", middleware="mqtt-broker").start_broker
    assert cfg("host", middleware="mqtt-broker", start_broker="true").start_broker
    assert cfg("host", middleware="rmw-zenoh", dry_run="true").start_router


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"colour": "red"}, "unknown launch argument colour"),
        ({"middleware": "zenoh"}, "middleware: unknown 'zenoh'"),
        ({"qos": "fast"}, "qos: unknown QoS profile 'fast'"),
        ({"namespace": "tb 4"}, "namespace: 'tb 4' is not a ROS namespace"),
        ({"security": "sros2"}, "keystore: security 'sros2' needs keystore:="),
        ({"security": "mtls-acl", "keystore": "/k"}, "security: security setting 'mtls-acl' does not apply"),
        ({"relay": "maybe"}, "relay:='maybe': expected true or false"),
        ({"domain_id": "x"}, "domain_id:='x': expected a whole number"),
        ({"domain_id": "300"}, "domain_id: Input should be less than or equal to 232"),
        ({"ros_distro": "iron"}, "ros_distro:=iron: supported: humble, jazzy"),
        ({"plan": "/nonexistent/plan.yaml"}, "plan:=/nonexistent/plan.yaml: cannot read"),
        ({"plan": '{"laps": 0}'}, "laps must be at least 1"),
        ({"plan": "{laps"}, "inline JSON does not parse"),
        ({"dds_peers": "10.0.0.1", "middleware": "zenoh-peer"}, "dds_peers: only used with middleware dds"),
    ],
)
def test_bad_arguments_are_one_line(args, message):
    with pytest.raises(LaunchArgError) as info:
        parse_launch_args(args, "host", environ=HUMBLE)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_distro_must_be_known_when_auto():
    with pytest.raises(LaunchArgError, match=r"\$ROS_DISTRO is unset"):
        parse_launch_args({}, "host", environ={})


def test_plan_from_file_inline_and_trial_yaml(tmp_path):
    (tmp_path / "p.yaml").write_text("laps: 2\nside_duration_s: 2.0\n")
    assert load_plan(str(tmp_path / "p.yaml"))[0] == SquarePlan(laps=2, side_duration_s=2.0)
    (tmp_path / "t.yaml").write_text("format_version: 1\nrequest:\n  plan: {laps: 3}\n")
    assert load_plan(str(tmp_path / "t.yaml"))[0].laps == 3
    assert load_plan('{"laps": 1, "turn_rate_dps": 45}')[0] == SquarePlan(laps=1, turn_rate_dps=45)
    (tmp_path / "bad.yaml").write_text("laps: [\n")
    with pytest.raises(LaunchArgError, match="not valid YAML"):
        load_plan(str(tmp_path / "bad.yaml"))


@pytest.mark.parametrize("middleware", MIDDLEWARES)
@pytest.mark.parametrize("role", ["host", "robot"])
def test_trial_request_round_trips_through_launch_arguments(middleware, role):
    plan = SquarePlan(laps=2, side_duration_s=2.0, command_rate_hz=50)
    transport = TransportConfig(
        middleware=middleware,
        qos="fernandez-c",
        namespace="/tb4",
        domain_id=7,
        robot_address="10.0.0.20",
        host_address="10.0.0.10",
        router_address="10.0.0.10",
        broker_address="10.0.0.30",
        zenoh_port=7500,
        mqtt_port=1999,
    )
    request = TrialRequest(plan=plan, transport=transport, cmd_type="twist_stamped")
    args = launch_args_for_trial(request, role, ros_distro="jazzy", trial_dir="/t", extra={"relay": "true"})
    assert set(args) <= set(LAUNCH_ARGUMENTS)
    cfg = parse_launch_args(args, role, environ={})
    assert cfg.plan == plan
    assert (cfg.middleware, cfg.qos, cfg.ns, cfg.domain_id, cfg.cmd_type) == (
        middleware,
        "fernandez-c",
        "/tb4",
        7,
        "twist_stamped",
    )
    assert (
        cfg.robot_address,
        cfg.settings(ZenohSettings).port,
        cfg.settings(MqttSettings).port,
        cfg.trial_dir,
        cfg.relay,
    ) == (
        "10.0.0.20",
        7500,
        1999,
        "/t",
        True,
    )
    assert cfg.cmd_topic == "fieldtest/cmd_vel"


# --------------------------------------------------------------------------------- environment


def _env(role, **args):
    cfg = parse_launch_args(args, role, environ={})
    return cfg, ros_environment(cfg, "/tmp/cyclone.xml")


@pytest.mark.parametrize("middleware", ["zenoh-peer", "zenoh-router", "mqtt-local-broker", "mqtt-broker"])
def test_bridged_cases_keep_dds_on_the_machine(middleware):
    _, humble = _env("host", middleware=middleware, ros_distro="humble")
    assert humble.set["ROS_LOCALHOST_ONLY"] == "1"
    assert "ROS_AUTOMATIC_DISCOVERY_RANGE" in humble.unset
    _, jazzy = _env("host", middleware=middleware, ros_distro="jazzy")
    assert jazzy.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert "ROS_LOCALHOST_ONLY" in jazzy.unset and "ROS_LOCALHOST_ONLY" not in jazzy.set
    for env in (humble, jazzy):
        assert env.set["RMW_IMPLEMENTATION"] == "rmw_cyclonedds_cpp"
        assert "ROS_SECURITY_ENABLE" in env.unset  # security protects the bridge hop instead
    # the robot whose base listens on usb0: DDS pinned to usb0 instead of localhost-only
    _, robot = _env("robot", middleware=middleware, ros_distro="humble", base_interface="usb0")
    assert robot.set["ROS_LOCALHOST_ONLY"] == "0"
    assert '<NetworkInterface name="usb0"/>' in robot.cyclonedds_xml and "wlan" not in robot.cyclonedds_xml
    assert robot.set["CYCLONEDDS_URI"] == "file:///tmp/cyclone.xml"


def test_plain_dds_discovers_over_the_lab_network():
    _, humble = _env("host", middleware="dds", ros_distro="humble", network_interface="wlan0")
    assert humble.set["ROS_LOCALHOST_ONLY"] == "0"
    assert "<AllowMulticast>spdp</AllowMulticast>" in humble.cyclonedds_xml
    _, peers = _env("host", middleware="dds", ros_distro="jazzy", dds_peers="10.0.0.20;10.0.0.21")
    assert peers.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
    assert peers.set["ROS_STATIC_PEERS"] == "10.0.0.20;10.0.0.21"
    assert "<AllowMulticast>false</AllowMulticast>" in peers.cyclonedds_xml
    cfg, default = _env("host", middleware="dds", ros_distro="humble")
    assert default.cyclonedds_xml is None and "CYCLONEDDS_URI" not in default.set
    # ...and the TurtleBot 4's own CYCLONEDDS_URI (pinned to wlan0) is not inherited either
    env = default.apply({"CYCLONEDDS_URI": "/etc/turtlebot4/cyclonedds_rpi.xml"})
    assert "CYCLONEDDS_URI" not in env
    assert "127.0.0.1" in peers.cyclonedds_xml  # same-machine processes find each other (loopback peer)


def test_security_environment_only_where_the_ros_graph_crosses_machines(tmp_path):
    _, dds = _env(
        "host", middleware="dds", security="sros2", keystore=str(tmp_path), ros_distro="humble", relay="true"
    )
    assert dds.set["ROS_SECURITY_ENABLE"] == "true"
    assert dds.set["ROS_SECURITY_STRATEGY"] == "Enforce"
    assert dds.set["ROS_SECURITY_KEYSTORE"] == str(tmp_path)
    _, rmw_zenoh = _env("robot", middleware="rmw-zenoh", ros_distro="jazzy", dry_run="true")
    assert rmw_zenoh.set["RMW_IMPLEMENTATION"] == "rmw_zenoh_cpp"
    assert "ROS_AUTOMATIC_DISCOVERY_RANGE" not in rmw_zenoh.set
    _, fast = _env("host", middleware="dds", dds="fastrtps", ros_distro="humble", network_interface="wlan0")
    assert fast.set["RMW_IMPLEMENTATION"] == "rmw_fastrtps_cpp" and "CYCLONEDDS_URI" not in fast.set
    assert any("Fast DDS" in note for note in fast.notes)


CYCLONE_PROBE = textwrap.dedent(
    """
    import sys
    from cyclonedds.domain import DomainParticipant
    try:
        DomainParticipant(0)
    except Exception as exc:
        print("FAILED", exc)
        sys.exit(1)
    print("OK")
    """
)


def _cyclone_accepts(xml: str, tmp_path) -> subprocess.CompletedProcess:
    path = tmp_path / "cyclonedds.xml"
    path.write_text(xml)
    env = {**os.environ, "CYCLONEDDS_URI": f"file://{path}"}
    return subprocess.run(
        [sys.executable, "-c", CYCLONE_PROBE], env=env, capture_output=True, text=True, timeout=60
    )


def test_generated_cyclonedds_configs_load_in_real_cyclonedds(tmp_path):
    import cyclonedds  # noqa: F401  (missing: the test fails, it is not skipped)

    with_peers = parse_launch_args(
        {"middleware": "dds", "network_interface": "lo", "dds_peers": "127.0.0.1"}, "host", environ=HUMBLE
    )
    bridged_robot = parse_launch_args(
        {"middleware": "zenoh-peer", "base_interface": "lo"}, "robot", environ=HUMBLE
    )
    for cfg in (with_peers, bridged_robot):
        done = _cyclone_accepts(cyclonedds_xml(cfg), tmp_path)
        assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
    # the check can fail: an interface that does not exist is refused by CycloneDDS
    bad = parse_launch_args({"middleware": "dds", "network_interface": "nosuchif0"}, "host", environ=HUMBLE)
    done = _cyclone_accepts(cyclonedds_xml(bad), tmp_path)
    assert done.returncode != 0


PUBSUB = textwrap.dedent(
    """
    import sys, time
    from dataclasses import dataclass
    from cyclonedds.domain import DomainParticipant
    from cyclonedds.idl import IdlStruct
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    @dataclass
    class Probe(IdlStruct, typename="Probe"):
        x: int

    dp = DomainParticipant(0)
    topic = Topic(dp, "fieldtest_lab_check", Probe)
    if sys.argv[1] == "pub":
        writer = DataWriter(dp, topic)
        for i in range(80):
            writer.write(Probe(i))
            time.sleep(0.1)
    else:
        reader = DataReader(dp, topic)
        end = time.time() + 8
        while time.time() < end:
            if reader.take(N=10):
                print("received")
                break
            time.sleep(0.05)
    """
)


@pytest.fixture
def netns_with_base_link():
    """A network namespace with a veth pair standing in for the Pi's usb0 link to the base."""
    name = f"ftlab{os.getpid()}"
    steps = [
        ["ip", "netns", "add", name],
        ["ip", "-n", name, "link", "add", "base0", "type", "veth", "peer", "name", "base1"],
        ["ip", "-n", name, "addr", "add", "192.168.186.3/24", "dev", "base0"],
        ["ip", "-n", name, "link", "set", "base0", "up"],
        ["ip", "-n", name, "link", "set", "base1", "up"],
        ["ip", "-n", name, "link", "set", "lo", "up"],
    ]
    try:
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode != 0:
                pytest.fail(f"network namespaces are needed (run as root): {' '.join(step)}")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_robot_pinned_to_its_base_interface_still_discovers_locally(netns_with_base_link, tmp_path):
    """Bridged robot config: DDS only on the base link; the bridge and the monitor on the Pi must
    still find each other (multicast discovery on that interface, delivered locally)."""
    import cyclonedds  # noqa: F401  (missing: the test fails, it is not skipped)

    cfg = parse_launch_args({"middleware": "zenoh-peer", "base_interface": "base0"}, "robot", environ=HUMBLE)
    path = tmp_path / "cyclonedds.xml"
    path.write_text(cyclonedds_xml(cfg))
    env = {**os.environ, "CYCLONEDDS_URI": f"file://{path}"}
    netns = ["ip", "netns", "exec", netns_with_base_link, sys.executable, "-c", PUBSUB]
    pub = subprocess.Popen([*netns, "pub"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sub = subprocess.run([*netns, "sub"], env=env, capture_output=True, text=True, timeout=60)
    finally:
        pub.kill()
        pub.wait()
    assert "received" in sub.stdout, sub.stderr


BRIDGED = [m for m in MIDDLEWARES if registry.get(m).lab_bridge is not None]


@pytest.mark.parametrize("preset", [p for p in ROBOT_TRAFFIC_PRESETS if p != "none"])
@pytest.mark.parametrize("middleware", BRIDGED)
@pytest.mark.parametrize("role", ["host", "robot"])
def test_the_trials_robot_traffic_reaches_both_sides_bridges(preset, middleware, role, tmp_path):
    """A campaign's robot_traffic goes from the trial request into each side's launch arguments
    (what `fieldtest lab run` starts) and from there into the bridge's config: the operator's tool on
    the host sees the robot's topics only if both bridges route them."""
    from fieldtest.labrun.orchestration.launchplan import launch_plan
    from fieldtest.robottraffic import preset_topics

    transport = TransportConfig(middleware=middleware, namespace="/tb4", zenoh_express=True)
    request = TrialRequest(transport=transport, cmd_type="twist_stamped", robot_traffic=preset)
    args = launch_args_for_trial(request, role, ros_distro="jazzy", trial_dir=str(tmp_path))
    assert args["robot_traffic"] == preset
    plan = launch_plan(args, role)
    assert (plan.cfg.robot_traffic, plan.cfg.settings(ZenohSettings).express) == (preset, True)
    configs = "\n".join(text for proc in plan.processes for text in proc.config_files.values())
    for topic in preset_topics(preset):
        assert f"tb4{topic.topic}" in configs, (topic.topic, role)
    if registry.get(middleware).family == "zenoh":  # the express route the campaign asked for
        assert "=1:express" in configs


@pytest.mark.parametrize("name", registry.names(lab=True))
@pytest.mark.parametrize("role", ["host", "robot"])
def test_the_clock_offset_channel_defaults_to_the_middlewares_own(name, role):
    """``clock_source:=auto``: UDP for MQTT (Paho C's Nagle delays the probes over the link), the
    trial's own link otherwise; an explicit choice is kept."""
    args = {"middleware": name, "namespace": "/tb4", "dry_run": "true", "relay": "true"}
    auto = parse_launch_args(args, role, environ=JAZZY)
    assert auto.clock_source == ("udp" if registry.get(name).family == "mqtt" else "link")
    assert parse_launch_args({**args, "clock_source": "link"}, role, environ=JAZZY).clock_source == "link"


@pytest.mark.parametrize("dds", ["fastrtps", "cyclonedds"])
def test_the_robots_zenoh_bridge_never_inherits_the_turtlebot4s_cyclonedds_file(dds, tmp_path):
    """zenoh-bridge-ros2dds is CycloneDDS inside whatever the nodes run: on a TurtleBot 4 login,
    whose setup.bash exports CYCLONEDDS_URI (cyclonedds_rpi.xml, pinned to wlan0), the bridge's
    discovery must stay where the kit puts it (here usb0, to the base), with Fast DDS nodes too."""
    from fieldtest.labrun.orchestration.launchplan import launch_plan

    login = {**os.environ, "CYCLONEDDS_URI": "file:///etc/turtlebot4/cyclonedds_rpi.xml"}
    args = {"middleware": "zenoh-peer", "dds": dds, "ros_distro": "jazzy", "base_interface": "usb0"}
    plan = launch_plan({**args, "trial_dir": str(tmp_path)}, "robot", environ=login)
    (bridge,) = [proc for proc in plan.processes if proc.name == "zenoh_bridge"]
    uri = {**plan.environment.apply(login), **bridge.env}.get("CYCLONEDDS_URI", "")
    assert "cyclonedds_rpi" not in uri
    if dds == "fastrtps":
        assert '<NetworkInterface name="usb0"/>' in uri and "wlan0" not in uri, uri


def test_the_guides_firewall_list_opens_every_port_the_laptop_is_reached_on():
    """Section 2's ufw list: the kit's Zenoh, MQTT, clock-probe and NatNet ports, NTP for the Pi's
    chrony, and the DDS ports of domain 0 as the RTPS port formula gives them."""
    from fieldtest.middleware.dds.lab import rtps_port_ranges
    from fieldtest.middleware.launch import CLOCK_UDP_PORT
    from fieldtest.middleware.mqtt.settings import MQTT_PORT, MQTT_TLS_PORT
    from fieldtest.middleware.zenoh.settings import ZENOH_PORT
    from fieldtest.names import NATNET_COMMAND_PORT, NATNET_DATA_PORT
    from fieldtest.testkit.guide import guide_steps

    allowed = re.findall(r"^sudo ufw allow (\S+)", guide_steps()["firewall"], re.M)
    dds = rtps_port_ranges(0)
    assert (dds["multicast"][0], dds["unicast"][-1]) == (7400, 7539)  # 7411 + 2 x 64
    assert sorted(allowed) == sorted(
        [
            f"{ZENOH_PORT}/tcp",
            f"{MQTT_PORT}/tcp",
            f"{MQTT_TLS_PORT}/tcp",
            "123/udp",
            f"{CLOCK_UDP_PORT}/udp",
            f"{NATNET_COMMAND_PORT}:{NATNET_DATA_PORT}/udp",
            f"{dds['multicast'][0]}:{dds['unicast'][-1]}/udp",
        ]
    )
    five = rtps_port_ranges(5)
    assert f"`{five['multicast'][0]}:{five['unicast'][-1]}`" in (ROOT / "docs" / "lab-guide.md").read_text()


def test_the_guides_pi_chrony_edit_survives_turtlebot4_setups_upgrades():
    """turtlebot4_setup's postinst copies /etc/turtlebot4/chrony.conf over /etc/chrony/chrony.conf
    on every install or upgrade: the Pi's edit goes into the file it copies, and the guide says why."""
    guide = (ROOT / "docs" / "lab-guide.md").read_text()
    section = guide[guide.index("## 4. Time sync") : guide.index("## 5. ")]
    pi = section[section.index("On the **Pi**") :]
    assert "Make that edit in `/etc/turtlebot4/chrony.conf`" in pi and "postinst" in pi
    assert "sudo cp /etc/turtlebot4/chrony.conf /etc/chrony/chrony.conf" in pi
