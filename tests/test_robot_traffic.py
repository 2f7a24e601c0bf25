"""The robot's own traffic (fieldtest.robottraffic, fieldtest.twin.trafficpubsub): the preset's
topics published by the robot side reach the host side at the preset's rates over the real
transports (CycloneDDS, Zenoh, Mosquitto, and the real Zenoh bridges), the DDS robot announces a
TurtleBot-4-sized ROS graph that a participant on the other end discovers, the record names the
preset, and ``none`` changes nothing."""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import pytest
from cyclonedds.domain import DomainParticipant
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from fieldtest import robottraffic, rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.middleware import registry
from fieldtest.middleware.labshared import link_topics
from fieldtest.middleware.registry import open_transport
from fieldtest.middleware.zenoh.bridge import ROBOT_DOMAIN_OFFSET, find_bridge
from fieldtest.middleware.zenoh.lab import ros2dds_plugin, run_trial_bridges, twin_side_launches
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.procs import free_port, lease_dds_domain
from fieldtest.record import TrialRequest
from fieldtest.transport import TransportConfig
from fieldtest.transport.rosgraph import ROS_DISCOVERY_TOPIC, participant_info_class
from fieldtest.twin.trafficpubsub import TURTLEBOT4_GRAPH, RobotTrafficSink, RobotTrafficSource

RUN_S = 3.0
SETTLE_S = 2.0  # the bridges' routes before the robot's end publishes
DISCOVERY_TIMEOUT_S = 30.0  # every topic's first message, however long a loaded machine's discovery takes


# ------------------------------------------------------------------------------ the presets


def test_presets_carry_the_turtlebot4_topics_at_their_upstream_sizes():
    topics = robottraffic.TOPICS
    scan = topics["/scan"].message
    assert len(scan.ranges) == len(scan.intensities) == 1080  # rplidar_ros: 360 * int(8000/10/360 + 1)
    image = topics["/oakd/rgb/preview/image_raw"].message
    assert (image.width, image.height, image.encoding) == (250, 250, "bgr8")  # oakd_pro.yaml preview
    assert topics["/oakd/rgb/preview/image_raw"].size_bytes > 250 * 250 * 3
    assert {t: topics[t].rate_hz for t in ("/odom", "/tf", "/imu")} == {
        "/odom": 20.0,
        "/tf": 20.0,
        "/imu": 100.0,
    }
    assert robottraffic.preset_topics("none") == []
    assert [t.topic for t in robottraffic.preset_topics("rviz")] == [
        "/scan", "/tf", "/odom", "/oakd/rgb/preview/image_raw",
    ]  # fmt: skip
    assert (
        set(robottraffic.PRESETS["rviz"])
        < set(robottraffic.PRESETS["foxglove"])
        < set(robottraffic.PRESETS["all"])
    )
    # the preview image is most of it: about 45 Mbit/s, most of a 50 Mbit/s Wi-Fi profile
    assert 40e6 < robottraffic.preset_rate_bytes("rviz") * 8 < 50e6


def test_rviz_view_robot_is_the_turtlebot4_robot_view_without_the_camera():
    """turtlebot4_viz's robot.rviz takes the scan and tf of the robot's topics and no camera: about
    0.4 Mbit/s, a hundredth of what the camera preview adds."""
    assert [t.topic for t in robottraffic.preset_topics("rviz-view-robot")] == ["/scan", "/tf"]
    assert set(robottraffic.PRESETS["rviz-view-robot"]) < set(robottraffic.PRESETS["rviz"])
    assert "/oakd/rgb/preview/image_raw" not in robottraffic.PRESETS["rviz-view-robot"]
    assert 0.35e6 < robottraffic.preset_rate_bytes("rviz-view-robot") * 8 < 0.45e6
    request = TrialRequest.model_validate({"robot_traffic": "rviz-view-robot"})
    assert request.robot_traffic == "rviz-view-robot"


@pytest.mark.parametrize("topic", sorted(robottraffic.TOPICS))
def test_each_topic_is_stamped_with_its_send_time(topic):
    t = robottraffic.TOPICS[topic]
    sent = 1_700_000_000_123_456_789
    back = rosmsg.deserialize(rosmsg.serialize(t.stamped(sent), t.typename), t.typename)
    assert t.sent_ns_of(back) == sent


def test_the_record_names_the_preset_and_refuses_bad_ones():
    request = TrialRequest.model_validate({"robot_traffic": "rviz"})
    assert request.model_dump(mode="json")["robot_traffic"] == "rviz"
    assert TrialRequest().robot_traffic == "none"
    with pytest.raises(ValueError, match="robot_traffic"):
        TrialRequest.model_validate({"robot_traffic": "rqt"})
    with pytest.raises(ValueError, match="robot_traffic 'rviz' with transport.security 'sros2'"):
        TrialRequest.model_validate(
            {"robot_traffic": "rviz", "transport": {"security": "sros2", "keystore": "/k"}}
        )


def _cli_request(*argv: str) -> TrialRequest:
    from fieldtest.runner.cli import add_common_args, request_from_args

    parser = argparse.ArgumentParser()
    add_common_args(parser)
    return request_from_args(parser.parse_args(list(argv)), "dds")


def test_the_command_line_option_reaches_the_request_and_its_name():
    plain = _cli_request()
    assert plain.robot_traffic == "none" and plain.name == "dds-none-loopback-r0"
    loaded = _cli_request("--robot-traffic", "foxglove", "--zenoh-express")
    assert loaded.robot_traffic == "foxglove" and loaded.transport.settings(ZenohSettings).express
    assert "traffic-foxglove" in loaded.name
    view = _cli_request("--robot-traffic", "rviz-view-robot")
    assert view.robot_traffic == "rviz-view-robot" and "traffic-rviz-view-robot" in view.name


def test_a_campaign_varies_robot_traffic(tmp_path):
    from fieldtest.trialcampaign import load_trials

    path = tmp_path / "c.yaml"
    path.write_text("campaign: rt\nmatrix:\n  robot_traffic: [none, rviz]\n  zenoh_express: [false, true]\n")
    _, requests = load_trials(path)
    assert sorted((r.robot_traffic, r.transport.settings(ZenohSettings).express) for r in requests) == [
        ("none", False), ("none", True), ("rviz", False), ("rviz", True),
    ]  # fmt: skip


def test_none_changes_nothing():
    """The preset none: no graph, no thread, no extra bridge route, no priority, no record section."""
    request = TrialRequest()
    source = RobotTrafficSource(request, transport=None, clock=Clock())  # type: ignore[arg-type]  # preset none never touches the link
    sink = RobotTrafficSink(request, transport=None, clock=Clock())  # type: ignore[arg-type]  # preset none never touches the link
    assert source.graph is None and source._thread is None and source.close() == {}
    assert sink.close() == {}
    transport = TransportConfig(middleware="zenoh-peer", zenoh_path="bridge")
    host, robot = twin_side_launches(transport, "twist_stamped")
    host_none, robot_none = twin_side_launches(transport, "twist_stamped", "none")
    assert link_topics(robot) == link_topics(robot_none)
    assert "pub_priorities" not in ros2dds_plugin(robot)
    assert ros2dds_plugin(host) == ros2dds_plugin(host_none)


def test_bridges_route_the_preset_and_the_priority_when_asked():
    transport = TransportConfig(middleware="zenoh-peer", zenoh_path="bridge", zenoh_express=True)
    host, robot = twin_side_launches(transport, "twist_stamped", "rviz")
    assert "/oakd/rgb/preview/image_raw" in ros2dds_plugin(robot)["allow"]["publishers"]
    assert "/scan" in ros2dds_plugin(host)["allow"]["subscribers"]
    assert ros2dds_plugin(host)["pub_priorities"] == ["^/cmd_vel$=1:express"]


# --------------------------------------------------------------- over the real transports


def _run_opened(request: TrialRequest, *, settle_s: float = 0.0) -> tuple[dict, dict]:
    """Open the robot's end first (it listens in Zenoh peer mode), then the host's; run; close both."""
    robot = open_transport(request.transport, "robot")
    host = open_transport(request.transport, "host")
    try:
        time.sleep(settle_s)
        return _run(request, robot, host)
    finally:
        host.close()
        robot.close()


def _run(request: TrialRequest, robot, host) -> tuple[dict, dict]:
    """Each side's per-topic counts; the received ones also carry ``stamps``: (the capture stamps of
    every message the robot sent, those the host received)."""
    clock = Clock()
    sink = RobotTrafficSink(request, host, clock)
    source = RobotTrafficSource(request, robot, clock)
    try:
        # the counted window starts once every topic arrived (readiness, not a discovery sleep)
        deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
        while any(c.received == 0 for c in sink.counts.values()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(RUN_S)
    finally:
        sent = source.close()
        received = sink.close()
    for topic, counts in sink.counts.items():
        received[topic]["stamps"] = (source.counts[topic].stamps_ns, counts.stamps_ns)
    return sent, received


def _assert_every_message_sent_between_arrived(received: dict, preset: str) -> None:
    """Every message the robot sent between the first and the last one the host received arrived,
    once and in order, told by the stamps themselves."""
    for topic in robottraffic.preset_topics(preset):
        sent, got = received[topic.topic]["stamps"]
        assert len(got) >= 2, (topic.topic, len(got))
        window = [s for s in sent if got[0] <= s <= got[-1]]
        missing = sorted(set(window) - set(got))
        assert got == window, (topic.topic, len(window), len(got), missing[:10])


def _assert_arrived_at_the_preset_rate(sent: dict, received: dict, preset: str) -> None:
    _assert_every_message_sent_between_arrived(received, preset)
    for topic in robottraffic.preset_topics(preset):
        got = received[topic.topic]
        assert sent[topic.topic]["sent"] >= topic.rate_hz * RUN_S, topic.topic
        # the record's figure agrees: the capture stamps are the schedule's, so it counts exactly
        assert (got["received"], got["lost_in_span"]) == (got["expected_in_span"], 0), (topic.topic, got)
        assert got["expected_in_span"] >= topic.rate_hz * RUN_S * 0.9, (topic.topic, got)
        assert got["bytes_received"] == got["received"] * topic.size_bytes


def _request(middleware: str, preset: str, **transport) -> TrialRequest:
    return TrialRequest.model_validate(
        {"robot_traffic": preset, "transport": {"middleware": middleware, **transport}}
    )


@pytest.mark.parametrize("preset", ["rviz", "rviz-view-robot", "foxglove"])
def test_dds_preset_arrives_at_its_rates(preset):
    with lease_dds_domain(150) as lease:
        request = _request("dds", preset, domain_id=lease.domain_id, namespace=f"/t{uuid.uuid4().hex[:8]}")
        sent, received = _run_opened(request)
    _assert_arrived_at_the_preset_rate(sent, received, preset)


def test_zenoh_preset_arrives_at_its_rates():
    request = _request("zenoh-peer", "rviz", zenoh_port=free_port(), namespace=f"/t{uuid.uuid4().hex[:8]}")
    sent, received = _run_opened(request)
    _assert_arrived_at_the_preset_rate(sent, received, "rviz")


def test_mqtt_preset_arrives_at_its_rates(tmp_path):
    """Through Mosquitto (QoS 1 for the default profile) every message arrives, as over DDS and Zenoh."""
    request = _request("mqtt-local-broker", "rviz", mqtt_port=free_port())
    with registry.infrastructure(request.transport, tmp_path):
        sent, received = _run_opened(request)
    _assert_arrived_at_the_preset_rate(sent, received, "rviz")


def test_bridged_zenoh_carries_the_preset_with_cmd_vel_at_priority(tmp_path, monkeypatch):
    """The real bridges (zenohd + zenoh-plugin-ros2dds) accept the priority and route the preset
    from the robot side's DDS to the host side's."""
    bridge = find_bridge()
    with lease_dds_domain(40, offsets=(0, ROBOT_DOMAIN_OFFSET)) as lease:
        request = _request(
            "zenoh-peer", "rviz", zenoh_path="bridge", zenoh_express=True, domain_id=lease.domain_id,
            zenoh_port=free_port(), namespace=f"/t{uuid.uuid4().hex[:8]}",
        )  # fmt: skip
        host_launch, robot_launch = twin_side_launches(
            request.transport, request.cmd_type, request.robot_traffic
        )
        monkeypatch.setenv("ROS_DISTRO", host_launch.ros_distro)
        with run_trial_bridges(host_launch, robot_launch, tmp_path / "bridges", bridge=bridge):
            # the bridges route a topic once both sides announced it
            sent, received = _run_opened(request, settle_s=SETTLE_S)
        config = (tmp_path / "bridges" / "zenoh_bridge_host.json5").read_text()
    assert "=1:express" in config
    for topic in robottraffic.preset_topics("rviz"):
        got = received[topic.topic]
        assert got["received"] >= 0.9 * got.get("expected_in_span", 1), (topic.topic, got)
        assert got.get("expected_in_span", 0) >= topic.rate_hz * RUN_S * 0.9, (topic.topic, got)


# ------------------------------------------------------------------------ the ROS graph


def _discovered(participant: DomainParticipant, wanted: set[str], timeout_s: float = 20.0) -> tuple[set, int]:
    """Node names announced on ros_discovery_info, and the participants (GIDs) that announced them,
    as another participant sees them."""
    # one instance (the type has no key) written by every participant: keep them all
    qos = Qos(Policy.Reliability.Reliable(0), Policy.Durability.TransientLocal, Policy.History.KeepLast(256))
    reader = DataReader(
        participant, Topic(participant, ROS_DISCOVERY_TOPIC, participant_info_class()), qos=qos
    )
    names: set[str] = set()
    announcers: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not wanted <= names:
        for sample in reader.take(64):
            names.update(node.node_name for node in sample.node_entities_info_seq)
            announcers.add(bytes(sample.gid.data))
        time.sleep(0.05)
    return names, len(announcers)


def test_dds_robot_announces_a_turtlebot4_sized_graph(monkeypatch):
    monkeypatch.setenv("ROS_DISTRO", "jazzy")
    wanted = {node.name for node in TURTLEBOT4_GRAPH}
    assert len(wanted) == len(TURTLEBOT4_GRAPH) >= 10  # one participant per process upstream starts
    with lease_dds_domain(170) as lease:
        request = _request("dds", "rviz", domain_id=lease.domain_id)
        robot = open_transport(request.transport, "robot")
        source = RobotTrafficSource(request, robot, Clock())
        other = DomainParticipant(lease.domain_id)  # the host end's view of the domain
        try:
            names, participants = _discovered(other, wanted)
        finally:
            source.close()
            robot.close()
            other.__del__()
    assert wanted <= names, f"missing from ros_discovery_info: {sorted(wanted - names)}"
    assert participants >= len(wanted)  # one participant per graph node
    assert source.graph_summary() == {
        "participants": len(TURTLEBOT4_GRAPH),
        "nodes": [node.name for node in TURTLEBOT4_GRAPH],
    }


def test_a_twin_trial_records_the_preset_and_the_counts(tmp_path):
    """A quick twin trial with rviz traffic: trial.yaml names the preset, the robot's sent and the
    host's received counts per topic are in the record, metrics.json and the report."""
    from fieldtest.analysis import analyze_trial, read_metrics
    from fieldtest.analysis.metrics.schema import METRICS_FILE
    from fieldtest.plan import SquarePlan
    from fieldtest.record import read_trial
    from fieldtest.runner import run_twin_trial

    # two laps with 90 deg/s turns, 16 s of commands: the counts, not the plan's length, are checked
    plan = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
    request = TrialRequest(name="rt", plan=plan, robot_traffic="rviz")
    result = run_twin_trial(request, tmp_path, domain_id=120)
    assert result.end_reason == "completed", result.detail
    record = read_trial(result.trial_dir)
    assert record.request.robot_traffic == "rviz"
    section = record.outcome.robot_traffic
    assert section["preset"] == "rviz" and section["graph"]["participants"] == len(TURTLEBOT4_GRAPH)
    for topic in robottraffic.PRESETS["rviz"]:
        figures = section["topics"][topic]
        assert figures["sent"] > 0 and figures["received"] > 0, (topic, figures)
    analyze_trial(result.trial_dir)
    metrics = read_metrics(Path(result.trial_dir) / "analysis" / METRICS_FILE)
    assert metrics.robot_traffic is not None
    assert metrics.robot_traffic.topics.keys() == section["topics"].keys()
    assert metrics.trial.variant == "robot traffic rviz"
    report = (Path(result.trial_dir) / "analysis" / "report.md").read_text()
    assert "## Robot traffic: preset rviz" in report
