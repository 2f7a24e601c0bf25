"""create3_preflight: reads the Create 3's /motion_control parameters and battery before a trial.

Refuses to start the trial (exit code 1) when the plan's 0.33 m/s would be clamped by the base
(safety_override not "full"), the battery is below ``min_battery_percent`` or the parameters
cannot be read (the finding says why: service not found, or a request unanswered); with ``warn_only``
the same findings are printed as warnings and it exits 0. While it reads, the report file says what
it waits for (``pending``): the robot's nodes start after it, so a runner whose pre-flight ends
first blames the gate, not the link.
The checks themselves are ``fieldtest.labrun.nodelogic.create3params`` (tested without ROS); this is the glue
that reads the values over the GetParameters service and the battery_state topic.

Parameters: plan (str, YAML of SquarePlan fields), warn_only (bool), min_battery_percent (float),
parameters (string list, names to read), out (str, JSON report path, empty = none),
timeout_s (float), battery_topic (str, default battery_state), motion_control (str, the base's
motion_control node, relative to the namespace or fully qualified as the launch plan gives it:
``<ns>/_do_not_use/motion_control`` on Jazzy, where create3_republisher does not relay parameter
services, ``<ns>/motion_control`` on Humble unless the TurtleBot 4 runs its discovery server).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _declare(node, name: str, default):
    return node.declare_parameter(name, default).value


def read_motion_control(
    node, names: list[str], timeout_s: float, motion_control: str, progress=lambda what: None
) -> tuple[dict, str]:
    """(values of ``names`` from <ns>/<motion_control>, why they could not be read or '').

    One request per name: a parameter service answers a request naming any undeclared parameter with
    no values at all (rclcpp and rclpy parameter_service), so one unknown name would hide the rest.
    The first unanswered request ends the reading: the next would wait as long for nothing.
    ``progress`` is told what the gate waits for before each wait."""
    from rcl_interfaces.srv import GetParameters

    from fieldtest.labrun.nodelogic.create3params import unanswered_request, unfound_service

    client = node.create_client(GetParameters, f"{motion_control}/get_parameters")
    try:
        progress(f"waiting {timeout_s:g} s for {client.srv_name} to appear")
        if not client.wait_for_service(timeout_sec=timeout_s):
            return {}, unfound_service(client.srv_name, timeout_s)
        values = {}
        for name in names:
            progress(f"waiting {timeout_s:g} s for {client.srv_name} to answer {name}")
            answered, value = _get_parameter(node, client, name, timeout_s)
            if not answered:
                return values, unanswered_request(client.srv_name, name, timeout_s)
            if value is not None:
                values[name] = value
        return values, ""
    finally:
        node.destroy_client(client)


def _get_parameter(node, client, name: str, timeout_s: float) -> tuple[bool, object]:
    """(whether the base answered, the value or None when it does not declare ``name``)."""
    import rclpy
    from rcl_interfaces.msg import ParameterType
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python

    future = client.call_async(GetParameters.Request(names=[name]))
    rclpy.spin_until_future_complete(node, future, timeout_sec=timeout_s)
    if not future.done() or future.result() is None:
        return False, None
    if not future.result().values:
        return True, None
    value = future.result().values[0]
    return True, None if value.type == ParameterType.PARAMETER_NOT_SET else parameter_value_to_python(value)


def _write_report(out: str, report: dict) -> None:
    """Whole or not at all: the runner reads the file while the gate runs."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)


def read_battery(node, topic: str, timeout_s: float) -> float | None:
    import rclpy
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import BatteryState

    seen: list[float] = []
    sub = node.create_subscription(
        BatteryState, topic, lambda m: seen.append(float(m.percentage)), qos_profile_sensor_data
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not seen and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_subscription(sub)
    return seen[-1] if seen else None


def main(argv: list[str] | None = None) -> int:
    import rclpy

    from fieldtest.labrun.configuration.launchsettings import LaunchArgError, load_plan
    from fieldtest.labrun.nodelogic.create3params import (
        CHECKED_PARAMETERS,
        format_findings,
        motion_control_node,
        pending_report,
        preflight_report,
    )

    rclpy.init(args=list(sys.argv if argv is None else argv))
    node = rclpy.create_node("create3_preflight")
    log = node.get_logger()
    try:
        plan, _ = load_plan(_declare(node, "plan", ""))
    except LaunchArgError as exc:
        log.fatal(str(exc))
        return 2
    warn_only = bool(_declare(node, "warn_only", False))
    minimum = float(_declare(node, "min_battery_percent", 30.0))
    names = list(_declare(node, "parameters", list(CHECKED_PARAMETERS)))
    out = _declare(node, "out", "")
    timeout_s = float(_declare(node, "timeout_s", 10.0))
    battery_topic = _declare(node, "battery_topic", "battery_state")
    motion_control = _declare(
        node, "motion_control", motion_control_node(os.environ.get("ROS_DISTRO", "jazzy"))
    )

    def progress(what: str) -> None:
        if out:
            _write_report(out, pending_report(what))

    try:
        params, unread = read_motion_control(node, names, timeout_s, motion_control, progress)
        progress(f"waiting {timeout_s:g} s for the base's {battery_topic}")
        battery = read_battery(node, battery_topic, timeout_s)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    report = preflight_report(
        params, plan, battery, min_battery_percent=minimum, warn_only=warn_only, unread=unread
    )
    for line in format_findings(report["findings"]):
        if line.startswith("[ok"):  # one severity per call site: rclpy refuses a change
            log.info(line)
        else:
            log.warning(line)
    if out:
        _write_report(out, report)
    if not report["go"]:
        print(
            "create3_preflight: refusing to start the trial (pass preflight_warn_only:=true to override)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
