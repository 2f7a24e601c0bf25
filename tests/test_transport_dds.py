"""CycloneDDS transport: ROS 2 wire compatibility, naming, configuration, and real delivery.

Every test uses its own random domain id and namespace: other test runs on this machine may use
DDS at the same time.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from fieldtest import rosmsg
from fieldtest.middleware.dds.settings import discovery_used
from fieldtest.middleware.dds.transport import (
    CYCLONEDDS_NS,
    DdsError,
    cyclonedds_xml,
    dds_qos,
    dds_topic_name,
    open_dds,
)
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import lease_dds_domain
from fieldtest.qos import QosError, get_qos
from fieldtest.transport import TransportConfig
from fieldtest.transport.ros_idl import dds_type_name, from_idl, idl_class, to_idl

PEER = Path(__file__).with_name("dds_peer.py")
sys.path.insert(0, str(PEER.parent))
from dds_peer import command_values  # noqa: E402

WAIT_S = 10.0  # generous: the machine's 2 cores are shared with other test runs

# A DDS domain of this test process's own, leased until it exits: a parallel run on this machine
# (another test worker, a demo) never shares it.
DDS_DOMAIN = lease_dds_domain(100 + os.getpid() % 100)


def unique_config(**overrides) -> TransportConfig:
    fields = {"domain_id": DDS_DOMAIN.domain_id, "namespace": f"t{uuid.uuid4().hex[:8]}"}
    fields.update(overrides)
    return TransportConfig(**fields)


def wait_until(predicate, timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---- sample messages of every type the kit sends, plus array-bearing types ----


def _time(ns):
    return rosmsg.time_msg(ns)


def sample_messages():
    cls = rosmsg.msg_class
    probe = cls(rosmsg.CLOCK_PROBE)(id=42, t1=_time(1_700_000_000_000_000_001), t2=_time(5), t3=_time(6))
    receipt = cls(rosmsg.COMMAND_RECEIPT)(
        seq=2**40 + 3,
        sent=_time(1_700_000_000_100_000_000),
        received=_time(1_700_000_000_112_345_678),
        clock_offset_s=-0.0012,
        latency_s=math.nan,
        twist=rosmsg.twist(0.33, math.radians(30)),
    )
    offset = cls(rosmsg.CLOCK_OFFSET_SAMPLE)(
        id=7, t1=_time(1), t2=_time(2), t3=_time(3), t4=_time(4), offset_s=0.5, delay_s=0.001
    )
    frame = cls(rosmsg.MOCAP_FRAME)(
        header=rosmsg.header(123, "mocap"),
        frame_number=99,
        rigid_body_id=-1,
        tracking_valid=True,
        mean_error_m=0.25,
        mocap_timestamp_s=12.5,
    )
    imu = cls("sensor_msgs/msg/Imu")(
        header=rosmsg.header(5, "imu"),
        orientation=cls("geometry_msgs/msg/Quaternion")(x=0.0, y=0.0, z=0.1, w=0.99),
        orientation_covariance=np.arange(9, dtype=np.float64),
        angular_velocity=cls("geometry_msgs/msg/Vector3")(x=1.0, y=2.0, z=3.0),
        angular_velocity_covariance=np.zeros(9),
        linear_acceleration=cls("geometry_msgs/msg/Vector3")(x=0.0, y=0.0, z=9.81),
        linear_acceleration_covariance=np.ones(9),
    )
    field = cls("sensor_msgs/msg/PointField")(name="x", offset=0, datatype=7, count=1)
    cloud = cls("sensor_msgs/msg/PointCloud2")(
        header=rosmsg.header(9, "lidar"),
        height=1,
        width=3,
        fields=[field],
        is_bigendian=False,
        point_step=4,
        row_step=12,
        data=np.arange(12, dtype=np.uint8),
        is_dense=True,
    )
    return {
        rosmsg.TWIST: rosmsg.twist(0.33, -0.52),
        rosmsg.TWIST_STAMPED: rosmsg.command(17, 1_700_000_000_123_456_789, 0.33, 0.0),
        rosmsg.POSE_STAMPED: rosmsg.pose_stamped(3, "mocap", (1.0, 2.0, 0.1), rosmsg.yaw_quaternion(0.7)),
        rosmsg.CLOCK_PROBE: probe,
        rosmsg.COMMAND_RECEIPT: receipt,
        rosmsg.CLOCK_OFFSET_SAMPLE: offset,
        rosmsg.MOCAP_FRAME: frame,
        "sensor_msgs/msg/Imu": imu,
        "sensor_msgs/msg/PointCloud2": cloud,
    }


SAMPLES = sample_messages()


@pytest.mark.parametrize("typename", list(SAMPLES))
def test_idl_serialization_equals_ros2_cdr(typename):
    """Cyclone's own bytes for the IdlStruct are the ROS 2 CDR bytes rosbags writes."""
    msg = SAMPLES[typename]
    ros_cdr = rosmsg.serialize(msg, typename)
    assert to_idl(msg, typename).serialize() == ros_cdr
    back = from_idl(idl_class(typename).deserialize(ros_cdr), typename)
    assert rosmsg.serialize(back, typename) == ros_cdr


def test_dds_type_names_follow_rmw_cyclonedds():
    assert dds_type_name(rosmsg.TWIST_STAMPED) == "geometry_msgs::msg::dds_::TwistStamped_"
    assert idl_class(rosmsg.CLOCK_PROBE).__idl_typename__ == "fieldtest_msgs::msg::dds_::ClockProbe_"
    assert idl_class(rosmsg.COMMAND_RECEIPT).__idl_typename__ == "fieldtest_msgs::msg::dds_::CommandReceipt_"


def test_topic_names_get_the_rt_prefix_and_namespace():
    assert dds_topic_name("tb4", "/cmd_vel") == "rt/tb4/cmd_vel"
    assert dds_topic_name("/tb4/", "cmd_vel") == "rt/tb4/cmd_vel"
    assert dds_topic_name("", "/cmd_vel") == "rt/cmd_vel"


def test_qos_profiles_map_to_dds_policies():
    text = repr(dds_qos(get_qos("sensor")))
    assert "BestEffort" in text and "KeepLast(depth=5)" in text and "Volatile" in text
    text = repr(dds_qos(get_qos("fernandez-e")))
    assert "Reliable" in text and "KeepAll" in text and "TransientLocal" in text


def _domain_xml(config: TransportConfig, role: str):
    root = ET.fromstring(cyclonedds_xml(config, role, security_xml="<Security/>"))
    return root.find("c:Domain", {"c": CYCLONEDDS_NS})


def test_xml_discovers_by_unicast_towards_both_ends():
    config = TransportConfig(host_address="10.0.0.1", robot_address="10.0.0.2", dds_discovery="none")
    domain = _domain_xml(config, "robot")
    ns = {"c": CYCLONEDDS_NS}
    assert domain.find("c:General/c:Interfaces/c:NetworkInterface", ns).get("address") == "10.0.0.2"
    assert domain.find("c:General/c:AllowMulticast", ns).text == "false"
    peers = [p.get("address") for p in domain.findall("c:Discovery/c:Peers/c:Peer", ns)]
    assert peers == ["10.0.0.1", "10.0.0.2"]
    assert domain.find("c:Discovery/c:ParticipantIndex", ns).text == "auto"
    assert domain.find("c:Security", ns) is not None


@pytest.mark.parametrize(("mode", "allow"), [("spdp", "spdp"), ("all", "true")])
def test_xml_discovers_by_multicast_as_the_lab_does(mode, allow):
    """spdp (the default, as the lab's AllowMulticast spdp) and all: no unicast peers, multicast on."""
    kwargs = {} if mode == "spdp" else {"dds_discovery": mode}
    config = TransportConfig(host_address="10.0.0.1", robot_address="10.0.0.2", **kwargs)
    domain = _domain_xml(config, "host")
    ns = {"c": CYCLONEDDS_NS}
    assert domain.find("c:General/c:Interfaces/c:NetworkInterface", ns).get("address") == "10.0.0.1"
    assert domain.find("c:General/c:AllowMulticast", ns).text == allow
    assert domain.find("c:Discovery", ns) is None


@pytest.mark.parametrize("mode", ["spdp", "all", "none"])
def test_loopback_falls_back_to_unicast_peers(mode):
    """Loopback has no multicast flag: every mode discovers by unicast there."""
    config = TransportConfig(dds_discovery=mode)
    assert discovery_used(config, "robot") == "none"
    domain = _domain_xml(config, "robot")
    assert domain.find("c:General/c:AllowMulticast", {"c": CYCLONEDDS_NS}).text == "false"
    assert domain.find("c:Discovery/c:Peers/c:Peer", {"c": CYCLONEDDS_NS}).get("address") == "127.0.0.1"


def test_unknown_qos_name_is_refused_at_open():
    with pytest.raises(QosError, match="valid names"):
        open_dds(unique_config(qos="bogus"), "host")


# ---- delivery within one process (two participants) ----


@pytest.fixture
def host_and_robot():
    config = unique_config()
    host = open_transport(config, "host")
    robot = open_transport(config, "robot")
    yield host, robot
    host.close()
    robot.close()


def test_delivery_between_two_participants(host_and_robot):
    host, robot = host_and_robot
    got = []
    robot.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, got.append)
    send = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    assert host.wait_for_match("/cmd_vel", timeout_s=WAIT_S)
    for seq in range(20):
        send(rosmsg.command(seq, seq, 0.33, 0.0))
        time.sleep(0.002)  # a burst would overrun the KEEP_LAST 10 reader history, as in ROS 2
    assert wait_until(lambda: len(got) == 20)
    assert [rosmsg.seq_of(m.header.frame_id) for m in got] == list(range(20))


def test_a_failing_callback_does_not_stop_the_subscription(host_and_robot):
    host, robot = host_and_robot
    got = []

    def fragile(msg):
        got.append(msg.id)
        if msg.id == 1:
            raise RuntimeError("callback bug")

    robot.subscribe("/probe", rosmsg.CLOCK_PROBE, fragile)
    send = host.publisher("/probe", rosmsg.CLOCK_PROBE)
    assert host.wait_for_match("/probe", timeout_s=WAIT_S)
    for i in range(3):
        send(SAMPLES[rosmsg.CLOCK_PROBE].__class__(id=i, t1=_time(i), t2=_time(0), t3=_time(0)))
    assert wait_until(lambda: got == [0, 1, 2])


def test_interoperates_with_plain_typed_cyclonedds_endpoints():
    """Raw ROS CDR written by the transport reads as typed IdlStruct samples, and back."""
    config = unique_config()
    transport = open_dds(config, "host")
    other = DomainParticipant(config.domain_id)
    try:
        cls = idl_class(rosmsg.TWIST_STAMPED)
        topic = Topic(other, dds_topic_name(config.namespace, "/cmd_vel"), cls)
        qos = dds_qos(get_qos("default"))
        typed_reader = DataReader(other, topic, qos=qos)
        typed_writer = DataWriter(other, topic, qos=qos)
        got = []
        transport.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, got.append)
        send = transport.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
        assert transport.wait_for_match("/cmd_vel", count=2, timeout_s=WAIT_S)

        msg = rosmsg.command(5, 123_456_789, 0.25, -0.5)
        send(msg)
        typed = []
        assert wait_until(lambda: typed.extend(typed_reader.take(10)) or len(typed) >= 1)
        assert typed[0] == to_idl(msg, rosmsg.TWIST_STAMPED)

        typed_writer.write(to_idl(rosmsg.command(6, 1, 0.1, 0.2), rosmsg.TWIST_STAMPED))
        assert wait_until(lambda: any(rosmsg.seq_of(m.header.frame_id) == 6 for m in got))
        assert all(m.twist.linear.x in (0.25, 0.1) for m in got)
    finally:
        transport.close()
        other.__del__()


def test_close_is_idempotent_and_final():
    transport = open_dds(unique_config(), "robot")
    transport.close()
    transport.close()
    with pytest.raises(DdsError, match="closed"):
        transport.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    assert not any(t.name.startswith("dds-robot") for t in threading.enumerate())


# ---- delivery between two OS processes over loopback ----


def _start_peer(role: str, config: TransportConfig, count: int) -> subprocess.Popen:
    args = [sys.executable, str(PEER), role, str(config.domain_id), config.namespace, config.qos, str(count)]
    return subprocess.Popen(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _expect_ready(proc: subprocess.Popen, who: str) -> None:
    line = proc.stdout.readline()  # the peer exits (EOF) after its own bounded match timeout
    if line.strip() != "READY":
        raise AssertionError(f"{who} not ready: {line!r} {proc.stderr.read()[-2000:]}")


@pytest.mark.parametrize("qos", ["default", "sensor"])
def test_two_processes_on_loopback(qos):
    count = 50
    config = unique_config(qos=qos)
    sub = _start_peer("sub", config, count)
    pub = _start_peer("pub", config, count)
    try:
        _expect_ready(sub, "subscriber")
        _expect_ready(pub, "publisher")
        pub.stdin.write("GO\n")
        pub.stdin.flush()
        out, err = sub.communicate(timeout=30)
        pub.stdin.write("DONE\n")  # the publisher's participant may go now
        pub.stdin.flush()
        assert sub.returncode == 0, err[-2000:]
        assert pub.wait(timeout=30) == 0, pub.stderr.read()[-2000:]
    finally:
        for proc in (sub, pub):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                stream.close()
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [r["seq"] for r in rows] == list(range(count))
    for r in rows:
        assert r["stamp_ns"] == 1_000_000_000 * r["seq"] + 7
        assert (r["v"], r["w"]) == command_values(r["seq"])
