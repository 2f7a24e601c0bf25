"""The Fast DDS transport: real Fast DDS participants (Debian's libfastrtps) carrying the kit's
topics, a real rmw_fastrtps_cpp node (the ROS 2 wheels in .venv-ros) on the other end, the
discovery server of fastdds-tools, and DDS Security from Debian's build of the plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.labrun.rehearsal.labrehearsal import ROS_VENV, ros_python
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.middleware.dds.transport import DdsError
from fieldtest.middleware.fastdds import discovery
from fieldtest.middleware.fastdds.transport import FastDdsError, FastDdsTransport, fastdds_topic_name
from fieldtest.perf.run import PerfCase, run_row
from fieldtest.procs import lease_dds_domain
from fieldtest.testkit import needs
from fieldtest.testkit.loopns import namespace_with_an_interface
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe

ECHO_NODE = Path(__file__).parent / "ros" / "fastdds_echo_node.py"
DOMAIN = lease_dds_domain(120 + os.getpid() % 50, offsets=(0, 1, 2, 3, 4))


def _config(offset: int = 0, **fields) -> TransportConfig:
    return TransportConfig(middleware="fastdds", domain_id=DOMAIN.domain_id + offset, **fields)


def _open_pair(config: TransportConfig):
    host = registry.open_transport(config, "host")
    try:
        robot = registry.open_transport(config, "robot")
    except Exception:
        host.close()
        raise
    return host, robot


def _drive(host, robot, count: int, *, match_s: float = 10.0) -> tuple[list, list[int], bool]:
    """``count`` stamped commands host -> robot; (what arrived with its arrival stamp, the send
    stamps, whether both ends matched)."""
    clock = Clock()
    got: list = []
    timed_subscribe(robot, "/cmd_vel", rosmsg.TWIST_STAMPED, lambda m, a: got.append((m, a)), clock)
    publish = stamped_publisher(host, "/cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
    matched = host.wait_for_match("/cmd_vel", timeout_s=match_s) and robot.wait_for_match(
        "/cmd_vel", timeout_s=1
    )
    sent = []
    for seq in range(count if matched else 0):
        sent.append(publish(prepare(rosmsg.command(seq, 0, 0.25, -0.5), rosmsg.TWIST_STAMPED)))
        time.sleep(0.005)
    deadline = time.monotonic() + 3.0
    while len(got) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.01)
    return got, sent, matched


def test_topic_and_type_names_are_rmw_fastrtps_ones():
    assert fastdds_topic_name("tb4", "/cmd_vel") == "rt/tb4/cmd_vel"
    assert fastdds_topic_name("", "cmd_vel") == "rt/cmd_vel"


@pytest.mark.parametrize("qos", ["default", "sensor", "fernandez-c"])
def test_commands_arrive_whole_with_send_and_arrival_stamps(qos):
    host, robot = _open_pair(_config(qos=qos))
    try:
        got, sent, matched = _drive(host, robot, 100)
    finally:
        host.close()
        robot.close()
    assert matched
    assert [rosmsg.seq_of(m.header.frame_id) for m, _ in got] == list(range(100))
    assert all(m.twist.linear.x == 0.25 and m.twist.angular.z == -0.5 for m, _ in got)
    # the send stamp went onto the wire, and the arrival was read after it, on the same clock
    assert [rosmsg.ns_of(m.header.stamp) for m, _ in got] == sent
    latencies_ms = sorted((arrival - rosmsg.ns_of(m.header.stamp)) / 1e6 for m, arrival in got)
    assert latencies_ms[0] > 0 and latencies_ms[len(latencies_ms) // 2] < 20.0, latencies_ms


def test_a_large_sample_is_fragmented_and_reassembled():
    """perf's largest messages: Fast DDS fragments what exceeds a datagram."""
    host, robot = _open_pair(_config(1))
    got: list = []
    try:
        robot.subscribe("/blob", rosmsg.POSE_STAMPED, got.append)
        publish = host.publisher("/blob", rosmsg.POSE_STAMPED)
        assert host.wait_for_match("/blob", timeout_s=10)
        frame = "x" * 300_000
        publish(rosmsg.pose_stamped(1, frame, (1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 1.0)))
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        host.close()
        robot.close()
    assert got and got[0].header.frame_id == frame and got[0].pose.position.z == 3.0


def test_close_is_idempotent_and_final():
    host = FastDdsTransport(_config(2), "host")
    publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    host.close()
    host.close()
    with pytest.raises(FastDdsError, match="closed"):
        publish(rosmsg.command(0, 0, 0.0, 0.0))


# The kit's side of the rmw_fastrtps test, in the test's namespace: argv = domain, address.
KIT_SIDE = """
import json, sys, time
from fieldtest import rosmsg
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
address = sys.argv[2]
config = TransportConfig(middleware="fastdds", domain_id=int(sys.argv[1]), namespace="/fdecho",
                         host_address=address, robot_address=address)
host = registry.open_transport(config, "host")
echoed = []
host.subscribe("/echo", rosmsg.TWIST_STAMPED, lambda m: echoed.append(rosmsg.seq_of(m.header.frame_id)))
publish = host.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
matched = host.wait_for_match("/cmd_vel", timeout_s=30) and host.wait_for_match("/echo", timeout_s=10)
deadline = time.monotonic() + 20
while matched and 1000 not in echoed and time.monotonic() < deadline:  # both ways matched at the node too
    publish(rosmsg.command(1000, time.time_ns(), 0.1, 0.0))
    time.sleep(0.1)
echoed.clear()
for seq in range(20 if matched else 0):
    publish(rosmsg.command(seq, time.time_ns(), 0.1, 0.0))
    time.sleep(0.02)
deadline = time.monotonic() + 5
while matched and len([e for e in echoed if e < 1000]) < 20 and time.monotonic() < deadline:
    time.sleep(0.02)
host.close()
print(json.dumps({"matched": matched, "echoed": [e for e in echoed if e < 1000]}))
"""
NAMESPACE_ADDRESS = "10.201.0.1"


def test_a_ros2_node_on_rmw_fastrtps_reads_and_answers_the_transport():
    """The wire form is rmw_fastrtps_cpp's: a real rclpy node on it (the TurtleBot 4's RMW, Fast DDS
    2.14 from the ROS 2 wheels) gets the kit's commands and echoes them back to the kit's
    subscription, discovery by multicast SPDP as the robot ships. In a namespace of the test's own:
    over loopback that Fast DDS never answers the 2.9 participant's unicast announcements."""
    needs.netns()
    domain = DOMAIN.domain_id + 3
    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": str(domain)}
    with namespace_with_an_interface(f"ftfastdds{os.getpid()}", NAMESPACE_ADDRESS) as prefix:
        node = subprocess.Popen(
            [*prefix, ros_python(ROS_VENV), str(ECHO_NODE), "/fdecho", "120"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert node.stdout is not None and node.stdout.readline().strip() == "READY", node.stderr
            kit = subprocess.run(
                [*prefix, sys.executable, "-c", KIT_SIDE, str(domain), NAMESPACE_ADDRESS],
                capture_output=True,
                text=True,
                timeout=120,
            )
            out, err = node.communicate(timeout=30)  # its stdin closes: it stops and reports
        finally:
            node.kill()
    kit_side = json.loads(kit.stdout.strip().splitlines()[-1])
    assert kit_side["matched"], kit.stderr[-2000:]
    assert kit_side["echoed"] == list(range(20)), (kit_side, err[-2000:])


def test_the_discovery_server_is_what_joins_its_clients(tmp_path):
    """``dds_discovery: server``: without the server the two clients never meet; with it (the
    fastdds-tools server, on the robot's address) they do, and the trial's host and robot get
    ROS_DISCOVERY_SERVER as a TurtleBot 4 set up for it does."""
    config = _config(4, dds_discovery="server")
    host, robot = _open_pair(config)
    try:
        _got, _sent, matched = _drive(host, robot, 0, match_s=3.0)
    finally:
        host.close()
        robot.close()
    assert not matched, "the clients met without a server"

    placed, env = registry.get("fastdds").twin_side_processes(config, "twist_stamped", tmp_path)
    assert env == {"ROS_DISCOVERY_SERVER": f"127.0.0.1:{discovery.SERVER_PORT}"}
    [(node, proc)] = placed
    assert node == "robot" and proc.name == "discovery-server"
    server = subprocess.Popen(proc.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        lines = [server.stdout.readline() for _ in range(5)]
        assert any("Server is running" in line for line in lines), lines
        host, robot = _open_pair(config)
        try:
            got, sent, matched = _drive(host, robot, 50)
        finally:
            host.close()
            robot.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert matched and len(got) == len(sent) == 50


def test_discovery_server_is_a_fast_dds_setting_only():
    with pytest.raises(DdsError, match="dds_discovery server: CycloneDDS has no discovery server"):
        registry.open_transport(TransportConfig(middleware="dds", dds_discovery="server"), "host")
    assert registry.get("dds").twin_side_processes(TransportConfig(), "twist", Path("/nonexistent")) == (
        [],
        {},
    )


def test_a_perf_row_crosses_an_emulated_lossy_link(tmp_path):
    """``fieldtest perf`` over Fast DDS on an emulated link: best effort with 30 % loss host -> robot,
    the counts add up (what left is what reached the relay plus what was lost). The way back is
    lossless: with 30 % each way Fast DDS 2.9's discovery took 6-55 s over 8 rows (it repeats and
    repairs in 3 s periods: fastdds/rtps/attributes/RTPSParticipantAttributes.h, WriterAttributes.h),
    past the row's 20 s warm-up; one way, 1-11 s over 24 rows on a loaded machine. Discovery is not
    what this counts."""
    from fieldtest.netem import get_profile

    needs.netns()
    lossy = {"lossy": get_profile({"name": "lossy", "up": {"loss_pct": 30}, "down": {"loss_pct": 0}})}
    case = PerfCase(
        middleware="fastdds", qos="sensor", network="lossy", message="Array1k", rate_hz=20, duration_s=2
    )
    row = run_row(case, tmp_path, profiles=lossy)
    assert row.status == "ok", row.error
    assert row.link["emulated"] is True
    sub = row.subscribers[0]
    assert sub["sent"] == 40 and sub["received"] + sub["lost"] == 40 and sub["lost"] > 0, sub


@pytest.fixture(scope="module")
def secure_keystore(tmp_path_factory) -> Path:
    """The kit's keystore (host and robot enclaves), its governance for this file's last domain."""
    from fieldtest.security.keystore import KeystoreOptions, create_keystore
    from fieldtest.security.policy import kit_enclave

    options = KeystoreOptions(
        domain_id=DOMAIN.domain_id + 4, enclaves=(kit_enclave("host"), kit_enclave("robot"))
    )
    return create_keystore(tmp_path_factory.mktemp("fastdds") / "keystore", options)


@pytest.mark.parametrize("setting", ["sros2", "rtps-sign", "plugins-only"])
def test_secured_participants_talk_and_a_plain_one_is_left_out(secure_keystore, setting):
    """Debian's libfastrtps has the DDS Security plugins: the kit's enclaves authenticate each other
    and carry the commands; a participant without credentials never matches them."""
    config = _config(4, security=setting, keystore=str(secure_keystore))
    host, robot = _open_pair(config)
    plain = registry.open_transport(_config(4), "host")
    try:
        plain.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, lambda _m: None)
        got, sent, matched = _drive(host, robot, 20)
        assert matched and len(got) == len(sent) == 20
        assert host.matched("/cmd_vel") == [1]  # the robot's reader; not the plain one
        assert plain.matched("/cmd_vel") == [0]
    finally:
        plain.close()
        host.close()
        robot.close()


def test_permissions_deny_the_robot_a_cmd_vel_writer(secure_keystore):
    """The robot's permissions grant it no /cmd_vel publication: Fast DDS's access control refuses
    the writer, as CycloneDDS's does."""
    robot = registry.open_transport(_config(4, security="sros2", keystore=str(secure_keystore)), "robot")
    try:
        with pytest.raises(FastDdsError, match="refused a writer on rt/cmd_vel"):
            robot.publisher("/cmd_vel", rosmsg.TWIST_STAMPED)
    finally:
        robot.close()
