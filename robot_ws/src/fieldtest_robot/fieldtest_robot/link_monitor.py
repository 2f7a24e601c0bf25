"""link_monitor: logs every received command with its latency on the robot's Pi (rclpy glue over
fieldtest.labrun.nodelogic.monitor, which composes fieldtest.endpoints' command receiver: the receipt and
clock-probe code the twin robot runs too).

Parameters (set by robot.launch.py):
  qos (str)                fieldtest QoS profile name of the link topics
  cmd_type (str)           twist (Humble: Twist + /fieldtest/cmd_stamp Header) or twist_stamped (Jazzy)
  trial_dir (str)          the robot bag (robot/) and robot_status.json go here; empty = temporary folder
  relay (bool)             listen on fieldtest/cmd_vel and forward to relay_topic with a stop-on-silence watchdog
  relay_topic (str)        the base's command topic, relative to the namespace (default cmd_vel)
  relay_type (str)         twist or twist_stamped: what the base (or create3_republisher) expects
  relay_silence_s (float)  send a zero command after this long without a command (< the base's 0.5 s)
  base_plain_context (bool)   talk to the base (relay, battery) from a second, non-secure ROS
                           context: the Create 3 cannot join an SROS2 domain
  relay_domain_id (int)    domain of that context; -1 = ROS_DOMAIN_ID
  battery_topic (str)      sensor_msgs/BatteryState topic, reported in robot_status.json for pre-flight
  clock_source (str)       link: the latency's clock offset from the probes over the trial's link;
                           udp: from plain UDP probes to the host's square_driver (fieldtest.labrun.nodelogic.udpclock)
  clock_host (str), clock_udp_port (int)   where those UDP probes go
  dry_run (bool)           listen on fieldtest/cmd_vel as with the relay, but forward nothing: the
                           base is not driven

The node initiates the clock probes (host answers) and writes a CommandReceipt per command and a
ClockOffsetSample per probe into <trial_dir>/robot, in the robot's clock.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def _declare(node, name: str, default):
    return node.declare_parameter(name, default).value


def _plain_base_node(namespace: str, domain_id: int):
    """A node in a second context created with ROS security off (the base is not an SROS2 member):
    the relay and the battery reading talk to the base through it."""
    import rclpy
    from rclpy.context import Context

    from fieldtest.labrun.nodelogic.rclpy_transport import init_without_signal_handlers

    context = Context()
    saved = os.environ.get("ROS_SECURITY_ENABLE")
    os.environ["ROS_SECURITY_ENABLE"] = "false"  # rcl reads the security options at context init
    try:
        init_without_signal_handlers(None, context=context, domain_id=domain_id if domain_id >= 0 else None)
    finally:
        if saved is None:
            os.environ.pop("ROS_SECURITY_ENABLE", None)
        else:
            os.environ["ROS_SECURITY_ENABLE"] = saved
    return rclpy.create_node("link_monitor_relay", namespace=namespace or None, context=context), context


def _distro() -> str:
    """The ROS 2 distro running this node ($ROS_DISTRO, or rclpy's version for the wheels)."""
    from fieldtest.labrun.configuration.launchsettings import LaunchArgError, detect_distro

    try:
        return detect_distro()
    except LaunchArgError:
        return "unknown"


def _relay_function(transport, topic: str, relay_type: str, clock_ns):
    from fieldtest import rosmsg

    if relay_type == "twist":
        return transport.publisher(topic, rosmsg.TWIST)
    publish = transport.publisher(topic, rosmsg.TWIST_STAMPED)

    def publish_stamped(twist) -> None:
        publish(rosmsg.msg_class(rosmsg.TWIST_STAMPED)(header=rosmsg.header(clock_ns()), twist=twist))

    return publish_stamped


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.qos import qos_profile_sensor_data

    from fieldtest.endpoints.link import RemappedTransport, command_remap
    from fieldtest.labrun.configuration.launchsettings import load_plan
    from fieldtest.labrun.nodelogic.driver import request_for_side
    from fieldtest.labrun.nodelogic.monitor import LabLinkMonitor
    from fieldtest.labrun.nodelogic.rclpy_transport import (
        RclpyTransport,
        arrival_stamp_source,
        executor_needs_realtime,
        init_without_signal_handlers,
        message_class,
        spin_in_background,
    )
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.procs import stop_on_signals
    from fieldtest.realtime import scheduling_note, settle_heap, try_realtime
    from fieldtest.record.recordnames import RELAY_CMD_VEL_TOPIC

    argv = list(sys.argv if argv is None else argv)
    realtime = try_realtime()  # before the middleware starts: its receive threads inherit SCHED_FIFO
    init_without_signal_handlers(argv)
    node = rclpy.create_node("link_monitor")
    log = node.get_logger()
    qos = _declare(node, "qos", "default")
    cmd_type = _declare(node, "cmd_type", "twist_stamped")
    trial_dir = _declare(node, "trial_dir", "") or tempfile.mkdtemp(prefix="fieldtest-robot-")
    relay = bool(_declare(node, "relay", False))
    dry_run = bool(_declare(node, "dry_run", False))
    relay_topic = "/" + _declare(node, "relay_topic", "cmd_vel").strip("/")
    relay_type = _declare(node, "relay_type", cmd_type)
    relay_silence_s = float(_declare(node, "relay_silence_s", 0.3))
    base_plain = bool(_declare(node, "base_plain_context", False))
    relay_domain_id = int(_declare(node, "relay_domain_id", -1))
    battery_topic = _declare(node, "battery_topic", "battery_state")
    clock_source = _declare(node, "clock_source", "link")
    clock_udp = (_declare(node, "clock_host", "127.0.0.1"), int(_declare(node, "clock_udp_port", 15131)))
    plan, _ = load_plan(_declare(node, "plan", ""))  # the trial's plan: where the stop burst's seqs begin
    for unused in ("middleware", "security"):
        _declare(node, unused, "")
    namespace = node.get_namespace().rstrip("/")

    link = RclpyTransport(node, namespace, qos)
    transport = RemappedTransport(link, command_remap(relay))
    rmw, distro = rclpy.get_rmw_implementation_identifier(), _distro()
    executor_realtime = realtime and executor_needs_realtime(rmw, distro)
    stamp = {**arrival_stamp_source(rmw, distro), "executor_realtime": executor_realtime}
    request = request_for_side(TransportConfig(qos=qos, namespace=namespace), plan, cmd_type, "lab-robot")
    extra_status: dict = {}

    def on_battery(msg) -> None:
        extra_status["battery_percentage"] = float(msg.percentage)

    base_plain_node = base_context = None
    if base_plain:
        base_plain_node, base_context = _plain_base_node(namespace, relay_domain_id)
    base_node = base_plain_node or node
    base_node.create_subscription(
        message_class("sensor_msgs/msg/BatteryState"), battery_topic, on_battery, qos_profile_sensor_data
    )
    relay_fn = None
    if dry_run:
        log.info(f"DRY RUN: logging {namespace}{RELAY_CMD_VEL_TOPIC}, nothing goes to the base")
    elif relay:
        relay_transport = RclpyTransport(base_node, namespace, "default")
        relay_fn = _relay_function(
            relay_transport, relay_topic, relay_type, lambda: node.get_clock().now().nanoseconds
        )
        log.info(
            f"relaying {namespace}{RELAY_CMD_VEL_TOPIC} -> {namespace}{relay_topic} ({relay_type}), "
            f"zero after {relay_silence_s:g} s of silence"
        )
    executor, spinner = spin_in_background(node, realtime=executor_realtime)
    # The plain context has its own executor: its battery subscription must be served too.
    base_spin = spin_in_background(base_plain_node, base_context) if base_plain_node is not None else None
    with stop_on_signals() as stop:
        monitor = LabLinkMonitor(
            request,
            Path(trial_dir),
            transport=transport,
            relay=relay_fn,
            relay_silence_s=relay_silence_s,
            realtime=realtime,
            clock_udp=clock_udp if clock_source == "udp" else None,
        )
        log.info(scheduling_note(realtime))
        settle_heap()
        monitor.extra_status = extra_status
        monitor.status_sources.append(lambda: {"arrival_stamp": {**stamp, "arrivals": dict(link.arrivals)}})
        log.info(
            f"arrival stamp: {stamp['source']} ({rmw}, {distro}); executor real-time: {executor_realtime}"
        )
        log.info(f"logging commands ({cmd_type}, qos {qos}) to {trial_dir}/robot; probing the host clock")
        try:
            monitor.run(stop)
        finally:
            status = monitor.close()
            log.info(
                f"received {status['received']} commands, missing {status['missing_in_range']}, "
                f"clock offset {status['clock_offset_s']} s"
            )
    for spun_executor, thread in [(executor, spinner), *([base_spin] if base_spin else [])]:
        spun_executor.shutdown(timeout_sec=1.0)
        thread.join(timeout=1.0)
    if base_plain_node is not None:
        base_plain_node.destroy_node()
        rclpy.try_shutdown(context=base_context)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
