"""square_driver: streams the square plan on /cmd_vel (rclpy glue over fieldtest.labrun.nodelogic.driver, which
composes fieldtest.endpoints' command streamer).

Parameters (set by host.launch.py):
  plan (str)            YAML of SquarePlan fields; empty = the seed study's square
  qos (str)             fieldtest QoS profile name (default, sensor, fernandez-a..e, parameters)
  cmd_type (str)        twist (Humble: Twist + /fieldtest/cmd_stamp Header) or twist_stamped (Jazzy)
  rate_hz (float)       command rate override; 0 keeps the plan's rate
  trial_dir (str)       where the host bag and lab/ control files go; empty = a temporary folder
  wait_for_go (bool)    wait for <trial_dir>/lab/go (the lab runner) before streaming
  relay (bool)          stream on fieldtest/cmd_vel because the robot relays to its base
  robot_lost_s (float)  stop (with the stop burst) after this long without a clock probe
  clock_udp_port (int)  answer the robot's UDP clock probes on this port (clock_source udp); 0 = off
  link_timeout_s (float) give up if the robot does not appear within this long
  middleware, security (str)  recorded in the bag's request only

The node's namespace is the robot namespace. Every command carries seq and send stamp
(header.frame_id "seq:<n>", header.stamp); the node answers the robot's clock probes; it always
ends with zero commands: plan done, Ctrl-C/SIGTERM, stop file, lost robot or error.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def _declare(node, name: str, default):
    return node.declare_parameter(name, default).value


def main(argv: list[str] | None = None) -> int:
    import rclpy

    from fieldtest.catalog import TWIN_MIDDLEWARES
    from fieldtest.endpoints.link import RemappedTransport, command_remap
    from fieldtest.labrun.configuration.launchsettings import LaunchArgError, load_plan
    from fieldtest.labrun.nodelogic.driver import LabDriver, request_for_side
    from fieldtest.labrun.nodelogic.rclpy_transport import (
        RclpyTransport,
        init_without_signal_handlers,
        spin_in_background,
    )
    from fieldtest.linkconfig import TransportConfig
    from fieldtest.procs import stop_on_signals
    from fieldtest.realtime import scheduling_note, settle_heap, try_realtime

    argv = list(sys.argv if argv is None else argv)
    realtime = try_realtime()  # before the middleware starts: its receive threads inherit SCHED_FIFO
    init_without_signal_handlers(argv)
    node = rclpy.create_node("square_driver")
    log = node.get_logger()
    try:
        plan, source = load_plan(_declare(node, "plan", ""))
        rate = float(_declare(node, "rate_hz", 0.0))
        if rate > 0:
            plan = plan.model_copy(update={"command_rate_hz": rate})
            plan = type(plan).model_validate(plan.model_dump())  # re-check tick boundaries at the new rate
        qos = _declare(node, "qos", "default")
        cmd_type = _declare(node, "cmd_type", "twist_stamped")
        trial_dir = _declare(node, "trial_dir", "") or tempfile.mkdtemp(prefix="fieldtest-host-")
        wait_for_go = bool(_declare(node, "wait_for_go", False))
        relay = bool(_declare(node, "relay", False))
        robot_lost_s = float(_declare(node, "robot_lost_s", 2.0))
        clock_udp_port = int(_declare(node, "clock_udp_port", 0))
        link_timeout_s = float(_declare(node, "link_timeout_s", 30.0))
        namespace = node.get_namespace().rstrip("/")
        middleware = _declare(node, "middleware", "dds")
        transport_config = TransportConfig(
            middleware=middleware
            if middleware in TWIN_MIDDLEWARES
            else "dds",  # rmw-zenoh, fastdds: lab only
            security=_declare(node, "security", "none"),
            qos=qos,
            namespace=namespace,
        )
    except (LaunchArgError, ValueError) as exc:
        log.fatal(f"bad parameter: {str(exc).splitlines()[0]}")
        node.destroy_node()
        rclpy.shutdown()
        return 2
    for warning in plan.warnings():
        log.warning(warning)
    request = request_for_side(transport_config, plan, cmd_type, name="lab-host")
    transport = RemappedTransport(RclpyTransport(node, namespace, qos), command_remap(relay))
    executor, spinner = spin_in_background(node)
    code = 1
    with stop_on_signals() as stop:
        driver = LabDriver(
            request,
            Path(trial_dir),
            transport=transport,
            wait_for_go=wait_for_go,
            robot_lost_s=robot_lost_s,
            realtime=realtime,
            clock_udp_port=clock_udp_port,
        )
        log.info(scheduling_note(realtime))
        settle_heap()
        log.info(
            f"plan {source}: {plan.n_ticks()} commands at {plan.command_rate_hz:g} Hz, {cmd_type}, qos {qos}"
        )
        log.info(f"recording to {trial_dir}; waiting for the robot's clock probes")
        try:
            code = driver.run(stop, link_timeout_s)
        finally:
            status = driver.close()
            log.info(
                f"end {status['end']}: sent {status['plan_sent']}/{status['plan_ticks']}, "
                f"stop burst {status['stop_burst_sent']}"
            )
    executor.shutdown(timeout_sec=1.0)
    spinner.join(timeout=1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
