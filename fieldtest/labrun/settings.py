"""Launch arguments of the lab's launch files, checked into one settings object (no ROS needed).

``host.launch.py`` and ``robot.launch.py`` hand their string arguments to ``parse_launch_args``;
everything else (environment, bridge command lines, configs) is computed from the ``LabLaunch`` it
returns. ``launch_args_for_trial`` goes the other way: the lab runner turns a ``TrialRequest`` into
the ``name:=value`` arguments of ``ros2 launch``, so a campaign trial and a hand-typed launch end
up in the same settings.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fieldtest.errors import FieldtestError
from fieldtest.middleware import registry
from fieldtest.middleware.base import Middleware
from fieldtest.names import BASE_CMD_TYPE, MQTT_PORT, MQTT_TLS_PORT, ROBOT_TRAFFIC_PRESETS, ZENOH_PORT
from fieldtest.plan import PlanError, SquarePlan, plan_from_mapping
from fieldtest.qos import QosError, get_qos
from fieldtest.record.names import CMD_VEL_TOPIC, RELAY_CMD_VEL_TOPIC
from fieldtest.record.trial import TrialRequest
from fieldtest.security.settings import SecuritySettingError, get_setting

CLOCK_UDP_PORT = 15131  # the host's UDP clock responder (clock_source:=udp); open it in a firewall

ROS_DISTROS = ("humble", "jazzy")
Role = Literal["host", "robot"]
_ROS_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)*/?$")  # a leading _ marks hidden names
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


class LaunchArgError(FieldtestError, ValueError):
    """A launch argument that cannot be used; the message is one line naming the argument."""


class LabLaunch(BaseModel):
    """Everything one side's launch file needs to start its processes."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    ros_distro: Literal["humble", "jazzy"] = "humble"
    middleware: str = "dds"
    security: str = "none"
    qos: str = "default"
    namespace: str = ""
    plan: SquarePlan = Field(default_factory=SquarePlan)
    plan_source: str = "seed study (default plan)"
    cmd_type: Literal["twist", "twist_stamped"] = "twist"
    dds: Literal["cyclonedds", "fastrtps"] = "cyclonedds"
    domain_id: int = Field(0, ge=0, le=232)
    host_address: str = "127.0.0.1"
    robot_address: str = "127.0.0.1"
    router_address: str = "127.0.0.1"
    broker_address: str = "127.0.0.1"
    zenoh_port: int = Field(ZENOH_PORT, ge=1, le=65535)
    mqtt_port: int = Field(MQTT_PORT, ge=1, le=65535)
    keystore: str = ""
    trial_dir: str = ""  # where this side records; empty = do not record
    network_interface: str = ""  # the Wi-Fi/Ethernet interface DDS uses between machines (e.g. wlan0)
    base_interface: str = ""  # robot only: the Pi's link to the Create 3 (usb0 on a TurtleBot 4)
    dds_peers: list[str] = Field(default_factory=list)  # static unicast discovery peers
    relay: bool = (
        False  # robot link monitor relays commands to the base (host then sends on fieldtest/cmd_vel)
    )
    zenoh_express: bool = (
        False  # bridge routes cmd_vel with priority 1 + express (not the seed study's setup)
    )
    # the robot's own topics the bridges also carry to the host (fieldtest.robottraffic presets):
    # an operator's RViz or Foxglove on the host sees them only if the bridge routes them
    robot_traffic: Literal[ROBOT_TRAFFIC_PRESETS] = "none"  # type: ignore[valid-type]
    start_router: bool = False  # host: run the Zenoh router (zenoh-router) / rmw_zenohd here
    start_broker: bool = False  # host: run Mosquitto here (mqtt-local-broker)
    record_ros2bag: bool = True  # also run `ros2 bag record` of this side's topics
    mqtt_inject_timestamp: bool = False  # mqtt_client's own latency measurement (both sides must agree)
    base_namespace: str = ""  # robot: the Create 3's own namespace (create3_base_namespace)
    # where the latency's clock offset is measured: over the trial's link, or plain UDP (labrun.udpclock)
    clock_source: Literal["link", "udp"] = "link"
    clock_port: int = Field(CLOCK_UDP_PORT, ge=1, le=65535)
    # the base is not driven: the host streams on the relay's topic, the link monitor logs and does
    # not forward (a rehearsal of the whole command path on the lab day; implies relay's topics)
    dry_run: bool = False

    @model_validator(mode="after")
    def _check(self) -> LabLaunch:
        if self.dry_run:
            self.relay = True  # commands on fieldtest/cmd_vel, which the base does not hear
        if self.middleware not in registry.names(lab=True):
            raise ValueError(
                f"middleware: unknown {self.middleware!r} (choose from {', '.join(registry.names(lab=True))})"
            )
        try:
            get_qos(self.qos)
        except QosError as exc:
            raise ValueError(f"qos: {exc}") from None
        for name in ("namespace", "base_namespace"):
            if not _ROS_NAME.match(getattr(self, name)):
                raise ValueError(f"{name}: {getattr(self, name)!r} is not a ROS namespace such as /tb4")
        if self.keystore:
            self.keystore = str(Path(self.keystore).expanduser())  # on the machine that runs the side
        if self.security != "none":
            if not self.keystore:
                raise ValueError(f"keystore: security {self.security!r} needs keystore:=<path>")
            if not self.entry.own_security:
                try:
                    get_setting(self.security, self.middleware)
                except SecuritySettingError as exc:
                    raise ValueError(f"security: {exc}") from None
        if self.dds_peers and self.entry.family != "dds":
            raise ValueError(
                "dds_peers: only used with middleware dds (bridged cases keep DDS on each machine)"
            )
        for problem in (_standstill_command_type, _secure_dds_without_relay, _robot_dds_off_the_network):
            reason = problem(self)
            if reason:
                raise ValueError(reason)
        return self

    @property
    def entry(self) -> Middleware:
        """The middleware's registry entry (what it declares for the lab)."""
        return registry.get(self.middleware)

    @property
    def rmw(self) -> str:
        """The RMW of this side's nodes: the middleware's own, else the ``dds`` choice."""
        return self.entry.lab_rmw or self.dds

    @property
    def bridged(self) -> bool:
        return self.entry.lab_bridge is not None

    @property
    def zenoh(self) -> bool:
        """Bridged by zenoh-bridge-ros2dds."""
        return self.entry.lab_bridge == "zenoh-bridge-ros2dds"

    @property
    def mqtt(self) -> bool:
        """Bridged by mqtt_client."""
        return self.entry.lab_bridge == "mqtt_client"

    @property
    def ns(self) -> str:
        """Namespace in the form ROS nodes take it: '' or '/tb4'."""
        stripped = self.namespace.strip("/")
        return f"/{stripped}" if stripped else ""

    @property
    def cmd_topic(self) -> str:
        """Topic (relative to the namespace) the host streams on: the base's own cmd_vel unless the
        robot relays, in which case the base must not hear the host directly."""
        return (RELAY_CMD_VEL_TOPIC if self.relay else CMD_VEL_TOPIC).lstrip("/")


def _standstill_command_type(cfg: LabLaunch) -> str:
    """A command type the base's cmd_vel does not take: every command ignored, the trial 'completes'."""
    wanted = BASE_CMD_TYPE[cfg.ros_distro]
    if cfg.cmd_type == wanted:
        return ""
    taker = "create3_republisher" if cfg.ros_distro == "jazzy" else "the Create 3"
    return (
        f"cmd_type: {cfg.cmd_type} on ROS 2 {cfg.ros_distro}, but {taker} takes {wanted} on cmd_vel, "
        f"so the base would stand still; use cmd_type auto (or {wanted})"
    )


def _secure_dds_without_relay(cfg: LabLaunch) -> str:
    """SROS2 on plain DDS: the Create 3 (on Jazzy its republisher too) is outside the secure domain,
    so only the link monitor's relay (publishing from a plain context) reaches it."""
    if cfg.security == "none" or cfg.entry.family != "dds" or cfg.relay:
        return ""
    return (
        f"relay: security {cfg.security} on middleware {cfg.middleware} needs relay:=true on both "
        "sides (--host-arg relay=true --robot-arg relay=true): the Create 3 cannot join the SROS2 "
        "domain, so without the relay it never hears the host"
    )


def _robot_dds_off_the_network(cfg: LabLaunch) -> str:
    """CycloneDDS uses exactly the interfaces its config lists: base_interface alone would pin the
    robot's DDS to the USB link to the base, where it never meets the host."""
    if cfg.role != "robot" or cfg.bridged or cfg.rmw != "cyclonedds":
        return ""
    if not cfg.base_interface or cfg.network_interface:
        return ""
    return (
        f"network_interface: base_interface:={cfg.base_interface} without network_interface pins the "
        f"robot's CycloneDDS to {cfg.base_interface} only, off the host's network; add "
        "network_interface:=wlan0 (the Pi's Wi-Fi)"
    )


# Launch argument name -> (field, kind). Kinds: str, int, bool, list, plan, auto-distro, auto-cmd.
LAUNCH_ARGUMENTS: dict[str, str] = {
    "middleware": "str",
    "security": "str",
    "qos": "str",
    "namespace": "str",
    "plan": "plan",
    "ros_distro": "distro",
    "cmd_type": "cmd_type",
    "dds": "str",
    "domain_id": "int",
    "host_address": "str",
    "robot_address": "str",
    "router_address": "str",
    "broker_address": "str",
    "zenoh_port": "int",
    "mqtt_port": "mqtt_port",
    "keystore": "str",
    "trial_dir": "str",
    "network_interface": "str",
    "base_interface": "str",
    "dds_peers": "list",
    "relay": "bool",
    "zenoh_express": "bool",
    "robot_traffic": "str",
    "start_router": "start_router",
    "start_broker": "start_broker",
    "record_ros2bag": "bool",
    "mqtt_inject_timestamp": "bool",
    "base_namespace": "base_namespace",
    "clock_source": "clock_source",
    "dry_run": "bool",
    "clock_port": "int",
}
AUTO = "auto"


def _bool(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise LaunchArgError(f"launch argument {name}:={text!r}: expected true or false")


def _int(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise LaunchArgError(f"launch argument {name}:={text!r}: expected a whole number") from None


def load_plan(text: str) -> tuple[SquarePlan, str]:
    """``plan:=`` value: empty or 'seed' for the seed study's square, an inline JSON object, or a
    YAML file of SquarePlan fields (a file with a ``plan:`` mapping, like trial.yaml's request, too)."""
    if text.strip() in ("", "seed", "default"):
        return SquarePlan(), "seed study (default plan)"
    if text.strip().startswith("{"):  # inline JSON: how the lab runner hands the plan to the robot
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LaunchArgError(f"launch argument plan: inline JSON does not parse ({exc.msg})") from None
        try:
            return plan_from_mapping(raw, "plan (inline)"), "inline"
        except PlanError as exc:
            raise LaunchArgError(f"launch argument {exc}") from None
    path = Path(text).expanduser()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise LaunchArgError(f"launch argument plan:={text}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise LaunchArgError(
            f"launch argument plan:={text}: not valid YAML ({str(exc).splitlines()[0]})"
        ) from None
    if isinstance(raw, dict) and isinstance(raw.get("request"), dict):
        raw = raw["request"]
    if isinstance(raw, dict) and isinstance(raw.get("plan"), dict):
        raw = raw["plan"]
    if not isinstance(raw, dict):
        raise LaunchArgError(f"launch argument plan:={text}: expected a mapping of plan fields")
    try:
        return plan_from_mapping(raw, str(path)), str(path)
    except PlanError as exc:
        raise LaunchArgError(f"launch argument plan:={exc}") from None


# rclpy's major version per distro (ros2/rclpy branches): the ROS 2 wheels set no ROS_DISTRO.
RCLPY_MAJOR_DISTRO = {3: "humble", 7: "jazzy"}


def installed_rclpy_distro() -> str:
    """The distro of the rclpy installed in this Python, '' if none (read from its metadata, not imported)."""
    from importlib import metadata

    for dist in ("rclpy", "ros-rclpy"):
        try:
            major = int(metadata.version(dist).split(".")[0])
        except (metadata.PackageNotFoundError, ValueError):
            continue
        return RCLPY_MAJOR_DISTRO.get(major, "")
    return ""


def detect_distro(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    distro = environ.get("ROS_DISTRO", "").strip().lower() or installed_rclpy_distro()
    if distro not in ROS_DISTROS:
        shown = distro or "unset (and no rclpy of a known distro installed)"
        raise LaunchArgError(
            f"launch argument ros_distro:=auto: $ROS_DISTRO is {shown}; supported: {', '.join(ROS_DISTROS)} "
            "(source /opt/ros/<distro>/setup.bash or pass ros_distro:=humble|jazzy)"
        )
    return distro


def parse_launch_args(
    args: Mapping[str, str], role: Role, environ: Mapping[str, str] | None = None
) -> LabLaunch:
    """Check the string arguments of a launch file; unknown names and bad values are one-line errors."""
    unknown = sorted(set(args) - set(LAUNCH_ARGUMENTS))
    if unknown:
        raise LaunchArgError(f"unknown launch argument {unknown[0]} (known: {', '.join(LAUNCH_ARGUMENTS)})")
    values: dict[str, Any] = {"role": role}
    deferred: dict[str, str] = {}
    for name, text in args.items():
        kind = LAUNCH_ARGUMENTS[name]
        text = str(text)
        if kind == "str":
            values[name] = text
        elif kind == "int":
            values[name] = _int(name, text)
        elif kind == "bool":
            values[name] = _bool(name, text)
        elif kind == "list":
            values[name] = [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]
        elif kind == "plan":
            values["plan"], values["plan_source"] = load_plan(text)
        else:
            deferred[name] = text.strip()
    distro = deferred.get("ros_distro", AUTO)
    values["ros_distro"] = detect_distro(environ) if distro in ("", AUTO) else distro
    if values["ros_distro"] not in ROS_DISTROS:
        raise LaunchArgError(f"launch argument ros_distro:={distro}: supported: {', '.join(ROS_DISTROS)}")
    _resolve_auto(values, deferred, role)
    values["base_namespace"] = _base_namespace(values, deferred, os.environ if environ is None else environ)
    try:
        return LabLaunch.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        reason = first["msg"].removeprefix("Value error, ")
        raise LaunchArgError(f"launch argument {where + ': ' if where else ''}{reason}") from None


def _resolve_auto(values: dict[str, Any], deferred: dict[str, str], role: Role) -> None:
    """Arguments whose default depends on others: 'auto' or absent picks the sensible value."""
    middleware = values.get("middleware", "dds")
    cmd = deferred.get("cmd_type", AUTO)
    values["cmd_type"] = BASE_CMD_TYPE[values["ros_distro"]] if cmd in ("", AUTO) else cmd
    port = deferred.get("mqtt_port", AUTO)
    secure = values.get("security", "none") != "none"
    values["mqtt_port"] = (
        (MQTT_TLS_PORT if secure else MQTT_PORT) if port in ("", AUTO) else _int("mqtt_port", port)
    )
    same = values.get("router_address", "127.0.0.1") == values.get("host_address", "127.0.0.1")
    starts = registry.get(middleware).lab_host_starts(same) if middleware in registry.REGISTRY else None
    router = deferred.get("start_router", AUTO)
    if router in ("", AUTO):
        values["start_router"] = role == "host" and starts == "router"
    else:
        values["start_router"] = _bool("start_router", router)
    broker = deferred.get("start_broker", AUTO)
    if broker in ("", AUTO):
        values["start_broker"] = role == "host" and starts == "broker"
    else:
        values["start_broker"] = _bool("start_broker", broker)
    clock = deferred.get("clock_source", AUTO)
    if clock in ("", AUTO) and middleware in registry.REGISTRY:
        from fieldtest.labrun.endpoints.udpclock import clock_source_for

        values["clock_source"] = clock_source_for(registry.get(middleware).family)
    elif clock not in ("", AUTO):
        values["clock_source"] = clock


def _base_namespace(values: dict[str, Any], deferred: dict[str, str], environ: Mapping[str, str]) -> str:
    """``base_namespace:=auto``: where the TurtleBot 4 puts the Create 3 for this distro; a
    TurtleBot 4 in discovery-server mode exports ROS_DISCOVERY_SERVER (turtlebot4_setup
    etc/turtlebot4/setup.bash) and hides the base on Humble too."""
    from fieldtest.labrun.endpoints.create3 import create3_base_namespace

    given = deferred.get("base_namespace", AUTO)
    if given not in ("", AUTO):
        return given
    server = bool(environ.get("ROS_DISCOVERY_SERVER", "").strip(' ;"'))
    return create3_base_namespace(values.get("namespace", ""), values["ros_distro"], discovery_server=server)


def inline_plan(plan: SquarePlan) -> str:
    """The plan as the one-line JSON ``plan:=`` accepts (no file to copy to the robot)."""
    return json.dumps(plan.model_dump(mode="json"), separators=(",", ":"))


# The robot launch's pre-flight gate arguments and their defaults (apart from the common arguments).
PREFLIGHT_ARGUMENTS = {"preflight": "true", "preflight_warn_only": "false", "min_battery_percent": "30"}


def lab_mqtt_port(request: TrialRequest) -> int:
    """The MQTT port of a lab trial: the one its transport names, else the standard one for its
    security, 1883 plain and 8883 TLS, so one broker machine serves a campaign with security off
    and on on two listeners (``fieldtest lab broker-config``)."""
    t = request.transport
    if "mqtt_port" in t.model_fields_set:
        return t.mqtt_port
    return MQTT_TLS_PORT if t.security != "none" else MQTT_PORT


def with_lab_defaults(request: TrialRequest) -> TrialRequest:
    """``request`` with the lab's defaults for what it leaves open (the MQTT port), so trial.yaml
    records what ran."""
    t = request.transport
    if "mqtt_port" in t.model_fields_set:
        return request
    transport = t.model_copy(update={"mqtt_port": lab_mqtt_port(request)})
    return request.model_copy(update={"transport": transport})


def launch_args_for_trial(
    request: TrialRequest,
    role: Role,
    *,
    ros_distro: str,
    plan_file: str | Path | None = None,
    trial_dir: str | Path,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``ros2 launch`` arguments that run ``request`` on one side (lab runner -> launch file)."""
    t = request.transport
    if request.cmd_type not in ("twist", "twist_stamped"):
        raise LaunchArgError(f"cmd_type {request.cmd_type!r} is not a lab command type")
    args = {
        "middleware": t.middleware,
        "security": t.security,
        "qos": t.qos,
        "namespace": t.namespace,
        "plan": str(plan_file) if plan_file else inline_plan(request.plan),
        "ros_distro": ros_distro,
        "cmd_type": request.cmd_type,
        "domain_id": str(t.domain_id),
        "host_address": t.host_address,
        "robot_address": t.robot_address,
        "router_address": t.router_address,
        "broker_address": t.broker_address,
        "zenoh_port": str(t.zenoh_port),
        "mqtt_port": str(lab_mqtt_port(request)),
        "keystore": t.keystore,
        "trial_dir": str(trial_dir),
    }
    args.update(extra or {})
    checked = {k: v for k, v in args.items() if role != "robot" or k not in PREFLIGHT_ARGUMENTS}
    parse_launch_args(checked, role, environ={})  # fail here, before anything starts
    return args
