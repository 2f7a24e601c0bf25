"""Create 3 base: the parameter file the lab uses and the pre-flight check of the base's parameters.

The seed study drives at 0.33 m/s, above the Create 3's default cap of 0.306 m/s: unless
``/motion_control`` ``safety_override`` is ``full`` (cap 0.46 m/s) the base silently clamps every
side to 0.918 m instead of 0.99 m (create3_docs docs/api/safety.md). Reflexes (bump, cliff, wheel
drop...) override commands; ``reflexes_enabled: false`` with ``safety_override: full`` is the known
working combination.

When commands stop, the base keeps executing the last one until "a fixed timeout" passes, then
stops the wheels (create3_docs docs/api/moving-the-robot.md). Its length is not reliably known:
the H.2.5 release notes (docs/releases/h_2_5.md) add ``wheels_stop_threshold_sec`` (default 0.5 s),
but the API page keeps that parameter commented out as "not yet available" and its parameter list
(docs/api/ros2.md) omits it. The pre-flight reads it when the base declares it and otherwise says
the value is unknown; the lab guide has a first-day step that measures it.

Where the base's nodes live: ``create3_base_namespace``. ``check_create3`` takes the parameters as
read from the base (``ros2 param dump`` YAML, or the robot's pre-flight node reading them over the
GetParameters service) and the plan, and says what would go wrong. The robot's pre-flight refuses
to start on a failure unless told to only warn.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import yaml

from fieldtest.errors import FieldtestError
from fieldtest.plan import (
    CREATE3_DEFAULT_MAX_SPEED_MPS,
    CREATE3_OVERRIDE_MAX_SPEED_MPS,
    CREATE3_WHEEL_ACCEL_MPS2,
    SquarePlan,
)

MOTION_CONTROL_NODE = "motion_control"
# wheels_stop_threshold_sec is read when the firmware declares it (see the module docstring).
CHECKED_PARAMETERS = ("safety_override", "reflexes_enabled", "wheels_stop_threshold_sec")
# The TurtleBot 4 gives the Create 3 the namespace <ROBOT_NAMESPACE>/_do_not_use and puts
# create3_republisher in front of it: always on Jazzy, on Humble only with its discovery server
# (turtlebot4_setup, turtlebot4_setup/turtlebot4_setup update_create3, jazzy and humble branches;
# turtlebot4_robot turtlebot4_bringup/launch/robot.launch.py).
HIDDEN_BASE_NAMESPACE = "_do_not_use"
MAX_ANGULAR_RPS = 1.9
Severity = Literal["ok", "warn", "fail"]


class Create3ParamError(FieldtestError, ValueError):
    """Parameter data that cannot be read (one line naming where it came from)."""


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _hidden_base(distro: str, discovery_server: bool) -> bool:
    """Humble (and Iron) put the base under the robot namespace unless the discovery server is on;
    Jazzy and later always hide it."""
    return discovery_server or distro.lower() not in ("humble", "iron")


def create3_base_namespace(robot_ns: str, distro: str, *, discovery_server: bool = False) -> str:
    """Namespace of the Create 3's own nodes on a TurtleBot 4 ('' or '/tb4', '/tb4/_do_not_use').

    The republisher relays topics, a few services and actions, but no parameter services
    (turtlebot4_robot turtlebot4_bringup/config/republisher.yaml): the base's parameters are read
    from this namespace directly, on a DDS graph that reaches the base (usb0).
    """
    stripped = robot_ns.strip("/")
    ns = f"/{stripped}" if stripped else ""
    return f"{ns}/{HIDDEN_BASE_NAMESPACE}" if _hidden_base(distro, discovery_server) else ns


def motion_control_node(distro: str, *, discovery_server: bool = False) -> str:
    """The base's motion_control node relative to the robot namespace ("motion_control" or
    "_do_not_use/motion_control"); create3_base_namespace gives the absolute prefix."""
    hidden = _hidden_base(distro, discovery_server)
    return f"{HIDDEN_BASE_NAMESPACE}/{MOTION_CONTROL_NODE}" if hidden else MOTION_CONTROL_NODE


# Where the Create 3's web server is: on a TurtleBot 4 the base is on the Pi's USB link only
# (192.168.186.2); turtlebot4_setup's webserver service forwards it to the Pi's port 8080
# (conf/webserver.service: socat TCP-LISTEN:8080 -> 192.168.186.2:80).
CREATE3_WEB_SERVER = "http://<Pi address>:8080 from the laptop, http://192.168.186.2 on the Pi itself"


def create3_param_file(namespace: str = "") -> str:
    """YAML for the Create 3 web server's "ROS 2 parameters file" (Application -> Configuration).

    The ``/**/`` prefix matches the node in any namespace, so the file survives a ROBOT_NAMESPACE
    change. Reboot the base (or restart its application) after uploading.
    """
    data = {
        f"/**/{MOTION_CONTROL_NODE}": {
            "ros__parameters": {
                "safety_override": "full",
                "reflexes_enabled": False,
            }
        }
    }
    head = (
        "# Create 3 parameters for fieldtest trials (upload in the Create 3 web server:\n"
        "# Application -> Configuration -> ROS 2 parameters file, then restart the application).\n"
        f"# Web server: {CREATE3_WEB_SERVER}.\n"
        "# safety_override full: lifts the 0.306 m/s cap to 0.46 m/s (the plan drives 0.33 m/s) and the\n"
        "#   backup limit; cliff safety is OFF: run trials on a floor without drops.\n"
        "# reflexes_enabled false: bump/cliff/wheel-drop reflexes no longer override commands.\n"
    )
    if namespace.strip("/"):
        humble = f"{create3_base_namespace(namespace, 'humble')}/{MOTION_CONTROL_NODE}"
        jazzy = f"{create3_base_namespace(namespace, 'jazzy')}/{MOTION_CONTROL_NODE}"
        head += (
            f"# Robot namespace /{namespace.strip('/')}: the node is {humble} (Humble) or {jazzy} (Jazzy).\n"
        )
    return head + yaml.safe_dump(data, sort_keys=False)


def parse_param_dump(text: str, source: str = "ros2 param dump") -> dict[str, Any]:
    """Parameters of motion_control from ``ros2 param dump`` YAML (any namespace, or a plain mapping)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise Create3ParamError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise Create3ParamError(f"{source}: expected a mapping of node -> ros__parameters")
    for node, body in data.items():
        if str(node).rstrip("/").split("/")[-1] == MOTION_CONTROL_NODE and isinstance(body, dict):
            params = body.get("ros__parameters")
            if isinstance(params, dict):
                return params
    if "safety_override" in data:
        return data
    raise Create3ParamError(f"{source}: no motion_control parameters in it")


def unfound_service(service: str, timeout_s: float) -> str:
    """Why the gate read no parameters when the base's parameter service never appeared."""
    return (
        f"{service} not found in {timeout_s:g} s: the base is off or asleep, or on another "
        "ROS_DOMAIN_ID than the robot's setup.bash"
    )


def unanswered_request(service: str, name: str, timeout_s: float) -> str:
    """Why the gate read no parameters when the base's service took a request and never answered."""
    return (
        f"{service} did not answer {name} within {timeout_s:g} s: the gate and the base speak different "
        "DDS vendors (RMW_IMPLEMENTATION in the robot's setup.bash must be the Create 3's, rmw_fastrtps_cpp "
        "on a stock TurtleBot 4) or the base is busy: restart its application (web server)"
    )


def _speed_finding(params: dict[str, Any], plan: SquarePlan, unread: str = "") -> Finding:
    override = params.get("safety_override")
    if override is None:
        why = unread or "could not read /motion_control parameters"
        return Finding("speed cap", "fail", f"safety_override unknown: {why}")
    if override not in ("none", "backup_only", "full"):
        return Finding("speed cap", "fail", f"safety_override {override!r} is not a Create 3 value")
    cap = CREATE3_OVERRIDE_MAX_SPEED_MPS if override == "full" else CREATE3_DEFAULT_MAX_SPEED_MPS
    speed = plan.linear_speed_mps
    if speed > cap + 1e-9:
        return Finding(
            "speed cap",
            "fail",
            f"{speed} m/s would be clamped to {cap} m/s (safety_override {override}); sides would be "
            f"{cap * plan.side_s:.3f} m, not {plan.side_m:.3f} m: set safety_override full (create3_params.yaml)",
        )
    return Finding("speed cap", "ok", f"safety_override {override}: cap {cap} m/s >= plan {speed} m/s")


def _reflex_finding(params: dict[str, Any]) -> Finding:
    enabled = params.get("reflexes_enabled")
    if enabled is None:
        return Finding("reflexes", "warn", "reflexes_enabled unknown (not read)")
    if enabled:
        return Finding(
            "reflexes", "warn", "reflexes enabled: a bump/cliff reflex can override the plan mid-trial"
        )
    return Finding("reflexes", "ok", "reflexes disabled")


def _watchdog_finding(params: dict[str, Any], plan: SquarePlan) -> Finding:
    threshold = params.get("wheels_stop_threshold_sec")
    if threshold is None:
        return Finding(
            "watchdog",
            "warn",
            "the base's stop-on-silence timeout is not readable on this firmware (no "
            "wheels_stop_threshold_sec): its value is unknown; measure it once (lab guide, Create 3 section)",
        )
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        return Finding("watchdog", "warn", f"wheels_stop_threshold_sec {threshold!r} is not a number")
    ticks = threshold * plan.command_rate_hz
    if ticks < 3:
        return Finding(
            "watchdog",
            "warn",
            f"the base stops after {threshold:g} s without a command = {ticks:.1f} command periods at "
            f"{plan.command_rate_hz:g} Hz: a short Wi-Fi stall stops the wheels mid-side",
        )
    return Finding("watchdog", "ok", f"stop after {threshold:g} s of silence = {ticks:.0f} command periods")


def _turn_finding(plan: SquarePlan) -> Finding:
    rate = abs(plan.turn_rps)
    if rate > MAX_ANGULAR_RPS:
        return Finding(
            "turn rate", "fail", f"turn rate {math.degrees(rate):.0f} deg/s exceeds the base's ~1.9 rad/s"
        )
    return Finding("turn rate", "ok", f"turn rate {plan.turn_rate_dps:g} deg/s within the base's limit")


def check_create3(params: dict[str, Any], plan: SquarePlan, unread: str = "") -> list[Finding]:
    """What the base's parameters mean for this plan: speed cap, reflexes, watchdog, turn rate;
    ``unread`` says why the parameters could not be read, if they could not."""
    return [
        _speed_finding(params, plan, unread),
        _reflex_finding(params),
        _watchdog_finding(params, plan),
        _turn_finding(plan),
    ]


def battery_finding(percentage: float | None, minimum_percent: float) -> Finding:
    """sensor_msgs/BatteryState.percentage is 0..1 (NaN if unknown)."""
    if percentage is None or not math.isfinite(percentage):
        return Finding("battery", "fail", "no battery state received (is the base running?)")
    percent = 100.0 * percentage
    if percent < minimum_percent:
        return Finding(
            "battery", "fail", f"battery at {percent:.0f} % < {minimum_percent:g} %: dock the robot first"
        )
    return Finding("battery", "ok", f"battery at {percent:.0f} %")


def verdict(findings: list[Finding], warn_only: bool = False) -> tuple[bool, list[Finding]]:
    """(go, findings) where failures become warnings when ``warn_only``."""
    if warn_only:
        findings = [Finding(f.check, "warn", f.detail) if f.severity == "fail" else f for f in findings]
    return all(f.severity != "fail" for f in findings), findings


def preflight_report(
    params: dict[str, Any],
    plan: SquarePlan,
    battery_percentage: float | None,
    *,
    min_battery_percent: float,
    warn_only: bool = False,
    unread: str = "",
) -> dict[str, Any]:
    """The robot pre-flight's result as written to ``lab/robot_preflight.json`` (and read by the runner)."""
    findings = check_create3(params, plan, unread) + [
        battery_finding(battery_percentage, min_battery_percent)
    ]
    go, findings = verdict(findings, warn_only)
    return {
        "go": go,
        "warn_only": warn_only,
        "findings": [f.as_dict() for f in findings],
        "parameters": {k: params.get(k) for k in CHECKED_PARAMETERS},
        "battery_percentage": battery_percentage,
    }


def pending_report(what: str) -> dict[str, Any]:
    """What the gate writes to its report file while it runs: what it is waiting for (no verdict
    yet), so that a runner whose pre-flight ends first names the gate and not the link."""
    return {"pending": what}


def format_findings(findings: list[dict[str, str]]) -> list[str]:
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    return [f"[{marks.get(f['severity'], f['severity'])}] {f['check']}: {f['detail']}" for f in findings]


# ------------------------------------------------------------------ stop on silence (first-day step)


@dataclass(frozen=True)
class StopMeasurement:
    """How long the base kept driving after its last command (seconds from that command)."""

    commanded_mps: float
    timeout_from_s: float  # the last sample still at speed, less the time the ramp takes to show
    timeout_to_s: float  # the first sample below the commanded speed
    stopped_s: float  # first sample at rest (adds the deceleration ramp)
    odom_period_s: float

    def summary(self) -> str:
        return (
            f"after the last command ({self.commanded_mps:.2f} m/s) the base started to stop after "
            f"{self.timeout_from_s:.3f}-{self.timeout_to_s:.3f} s (odometry every "
            f"{self.odom_period_s * 1000:.0f} ms) and stood still after {self.stopped_s:.3f} s"
        )


def measure_stop_after_silence(
    commands: list[tuple[float, float]], odom: list[tuple[float, float]], *, tolerance_mps: float = 0.01
) -> StopMeasurement:
    """The base's stop-on-silence timeout from (time, linear command) and (time, odometry speed)
    samples on one clock: drive straight at a constant speed, then stop publishing (no zeros)."""
    moving = [(t, v) for t, v in commands if abs(v) > tolerance_mps]
    if not moving:
        raise Create3ParamError("no motion command in the recording")
    last_t, speed = max(moving)
    if max(t for t, _ in commands) > last_t:
        raise Create3ParamError("the commands end with zeros: stop publishing instead of sending a stop")
    after = sorted((t, abs(v)) for t, v in odom if t >= last_t)
    at_speed = abs(speed) - tolerance_mps
    if not after or after[0][1] < at_speed:
        raise Create3ParamError(
            "odometry does not show the base at the commanded speed and then slowing after the last command"
        )
    stopped = next((t for t, v in after if v <= tolerance_mps), None)
    if stopped is None:
        raise Create3ParamError(
            f"the recording ends {after[-1][0] - last_t:.2f} s after the last command, before the base "
            "stood still: keep recording until it stops (lab guide section 5: sleep 3 before stopping it)"
        )
    # The stop began after the last sample at speed before the base came to rest: a dip that
    # recovers (odometry noise) is not the stop.
    still = max(t for t, v in after if t < stopped and v >= at_speed)
    braking = next(t for t, _ in after if t > still)
    times = sorted(t for t, _ in odom)
    period = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
    # Braking at the wheel acceleration limit takes this long to fall below the tolerance.
    unseen = tolerance_mps / CREATE3_WHEEL_ACCEL_MPS2
    return StopMeasurement(
        commanded_mps=abs(speed),
        timeout_from_s=max(0.0, still - last_t - unseen),
        timeout_to_s=braking - last_t,
        stopped_s=stopped - last_t,
        odom_period_s=period,
    )
