"""Mixed DDS vendors, as a lab meets them: the host on CycloneDDS and the robot with its base on
Fast DDS (a stock TurtleBot 4), and the reverse. Real libraries on both ends: the kit's CycloneDDS
and Fast DDS transports for the topics; for the base's parameter service, rclpy from the ROS 2
wheels on rmw_fastrtps_cpp (Fast DDS 2.14) and the rmw_cyclonedds wire form on the kit's CycloneDDS
(no rmw_cyclonedds_cpp wheel exists for the ROS 2 wheels)."""

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
from fieldtest.middleware.dds.family import MixedVendorError
from fieldtest.middleware.dds.transport import DdsTransport
from fieldtest.middleware.fastdds.transport import FastDdsTransport
from fieldtest.plan import SquarePlan
from fieldtest.procs import lease_dds_domain
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import run_twin_trial
from fieldtest.testkit import needs
from fieldtest.testkit.loopns import namespace_with_an_interface
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe

PARAMETER_NODE = Path(__file__).parent / "ros" / "parameter_node.py"
DOMAIN = lease_dds_domain(170 + os.getpid() % 40, offsets=(0, 1, 2))
ADDRESS = "10.202.0.1"
OPENED = {"dds": DdsTransport, "fastdds": FastDdsTransport, "cyclonedds": DdsTransport}
# each vendor's server: a Create 3's motion_control node, under a namespace of the vendor's own
SERVED = {"fastdds": ("/fastdds", "motion_control"), "cyclonedds": ("/cyclonedds", "motion_control")}


@pytest.mark.parametrize(("middleware", "robot_vendor"), [("dds", "fastdds"), ("fastdds", "cyclonedds")])
def test_commands_and_receipts_cross_the_two_vendors(middleware, robot_vendor):
    """The trial's ``dds: {robot_vendor: ...}`` puts the robot on the other vendor; the stamped
    command stream reaches it whole and its receipts come back."""
    config = TransportConfig(
        middleware=middleware, domain_id=DOMAIN.domain_id, dds={"robot_vendor": robot_vendor}
    )
    host = registry.open_transport(config, "host")
    robot = registry.open_transport(config, "robot")
    clock, got, receipts = Clock(), [], []
    try:
        assert type(host) is OPENED[middleware] and type(robot) is OPENED[robot_vendor]
        timed_subscribe(robot, "/cmd_vel", rosmsg.TWIST_STAMPED, lambda m, a: got.append((m, a)), clock)
        host.subscribe(
            "/receipt", rosmsg.TWIST_STAMPED, lambda m: receipts.append(rosmsg.seq_of(m.header.frame_id))
        )
        publish = stamped_publisher(host, "/cmd_vel", rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock)
        receipt = robot.publisher("/receipt", rosmsg.TWIST_STAMPED)
        # both ends of both topics: a writer may match a reader that has not yet matched it, and a
        # reader drops what comes from a writer it does not know yet
        assert all(
            side.wait_for_match(topic, timeout_s=10)
            for side in (host, robot)
            for topic in ("/cmd_vel", "/receipt")
        )
        sent = []
        for seq in range(50):
            sent.append(publish(prepare(rosmsg.command(seq, 0, 0.25, 0.0), rosmsg.TWIST_STAMPED)))
            receipt(rosmsg.command(seq, 0, 0.0, 0.0))
            time.sleep(0.005)
        deadline = time.monotonic() + 3
        while (len(got) < 50 or len(receipts) < 50) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        host.close()
        robot.close()
    assert [rosmsg.seq_of(m.header.frame_id) for m, _ in got] == list(range(50))
    assert [rosmsg.ns_of(m.header.stamp) for m, _ in got] == sent  # the send stamp crossed intact
    assert all(arrival > rosmsg.ns_of(m.header.stamp) for m, arrival in got)
    assert receipts == list(range(50))


@pytest.mark.parametrize(("middleware", "robot_vendor"), [("dds", "fastdds"), ("fastdds", "cyclonedds")])
def test_a_twin_trial_with_the_robot_on_the_other_vendor(tmp_path, middleware, robot_vendor):
    """The whole twin trial on an emulated Wi-Fi link (multicast SPDP between the two vendors, as a
    lab's): every command and clock probe crosses, and the record says what each side ran and that
    services would not cross."""
    from fieldtest.analysis.pipeline import analyze_trial

    needs.netns()
    request = TrialRequest(
        name=f"mixed-{robot_vendor}",
        plan=SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5),
        network="wifi",
        transport={"middleware": middleware, "dds": {"robot_vendor": robot_vendor}},
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    record = read_trial(result.trial_dir)
    host = {"dds": "cyclonedds", "fastdds": "fastdds"}[middleware]
    assert record.outcome.dds_vendors == {"host": host, "robot": robot_vendor}
    assert any(w.startswith(f"host on {host}, robot on {robot_vendor}: ") for w in record.outcome.warnings)
    metrics = analyze_trial(result.trial_dir, plots=False)
    assert metrics.trial.variant == f"robot on {robot_vendor}"  # compare keeps it apart
    latency = metrics.latency
    # Every command crossed: a writer can match the other vendor's reader before that reader has
    # matched it, and the reader drops what comes before; the robot's probes, which the host's go
    # waits for, start only once its command reader has matched the host's writer
    sent = latency.commands_sent
    assert sent is not None and sent > 0 and latency.commands_received == sent and latency.lost_spans == [], (
        latency
    )
    assert (
        latency.round_trip_ms is not None and latency.round_trip_ms.count > 0
    )  # the clock probes went and came back


def test_security_across_two_vendors_is_refused():
    config = TransportConfig(middleware="dds", security="sros2", dds={"robot_vendor": "fastdds"})
    with pytest.raises(MixedVendorError, match="security across two DDS vendors"):
        registry.open_transport(config, "robot")


def test_a_parameter_read_is_answered_within_a_vendor_and_never_across():
    """The base's parameter service (a Create 3's ``_do_not_use/motion_control``): a real rclpy
    node on Fast DDS and an rmw_cyclonedds-form server on CycloneDDS, each read by a client of
    each vendor. Within a vendor the values come back; across, the request reaches the server (the
    endpoints match) but its payload is 16 bytes out of place (rmw_cyclonedds' request header), the
    server cannot read it and nothing answers.

    The Fast DDS server reads the header's first four bytes as the count of names. rmw_cyclonedds'
    are random from one client to the next; the client here sends a count that cannot be allocated,
    so the server refuses at once. A count it can allocate (up to about a billion here) makes it
    create that many strings first, which is a wait of its own, not what is tested here."""
    needs.netns()
    env = {**os.environ, "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp", "ROS_DOMAIN_ID": str(DOMAIN.domain_id + 1)}
    fast = [ros_python(ROS_VENV), str(PARAMETER_NODE)]
    cyclone = [sys.executable, "-m", "fieldtest.middleware.dds.parameters"]
    unallocatable_count = f"{0x0123_4567_FFFF_FFF0:#x}"  # little-endian: the low half comes first
    with namespace_with_an_interface(f"ftmixed{os.getpid()}", ADDRESS) as prefix:
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        servers = {
            "fastdds": subprocess.Popen(
                [*prefix, *fast, "serve", *SERVED["fastdds"]], env=env, text=True, **pipes
            ),
            "cyclonedds": subprocess.Popen(
                [*prefix, *cyclone, "serve", "/".join(SERVED["cyclonedds"])], env=env, text=True, **pipes
            ),
        }
        try:
            for server in servers.values():
                assert server.stdout is not None and server.stdout.readline().strip() == "READY", (
                    server.stderr
                )
            answers = {}
            nodes = {"/".join(SERVED[vendor]): vendor for vendor in servers}
            clients = {
                "fastdds": [*fast, "get"],
                "cyclonedds": [*cyclone, "get", "--client-guid", unallocatable_count],
            }
            for client, argv in clients.items():
                done = subprocess.run(
                    [*prefix, *argv, "4", *nodes], env=env, capture_output=True, text=True, timeout=90
                )
                read = json.loads(done.stdout.strip().splitlines()[-1])
                answers.update({(client, nodes[node]): answer for node, answer in read.items()})
            outcomes = {name: ended(name, server) for name, server in servers.items()}
        finally:
            for server in servers.values():
                server.kill()
    for (client, vendor), answer in answers.items():
        assert answer["server"], (client, vendor, answer)  # discovery matched across vendors too
        expected = ["full", False] if client == vendor else None
        assert answer["values"] == expected, (client, vendor, answer)
    # the Fast DDS server could not read the CycloneDDS request; the CycloneDDS one the Fast DDS request
    assert "failed to create array for field 'names'" in outcomes["fastdds"][1], outcomes["fastdds"]
    assert json.loads(outcomes["cyclonedds"][0].strip().splitlines()[-1]) == {"answered": 1, "unreadable": 1}


def ended(name: str, server: subprocess.Popen) -> tuple[str, str]:
    """The server's output once its stdin closed; the failure says what it printed if it hangs."""
    try:
        return server.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        pytest.fail(
            f"the {name} parameter server did not end within 20 s of its stdin closing: {server.communicate()}"
        )
