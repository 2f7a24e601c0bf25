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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from fieldtest.linkconfig import SETTINGS_MODELS, Role, TransportConfig, family_modules
from fieldtest.middleware import registry
from fieldtest.middleware.launch import (
    LAB_SETTINGS_MODELS,
    ROS_DISTROS,
    LabLaunch,
    LaunchArgError,
    lab_argument,
)
from fieldtest.names import BASE_CMD_TYPE
from fieldtest.plan import PlanError, SquarePlan, plan_from_mapping
from fieldtest.record.trial import TrialRequest

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


# family name -> its settings module (fieldtest.middleware.<family>.settings)
FAMILY_SETTINGS = family_modules("settings")


@dataclass(frozen=True)
class FamilyArgument:
    """A launch argument a family declares: ``<family>_<field>:=`` (``zenoh_port``), one field of
    its link ``Settings`` (listed in its settings module's ``LAUNCH_FIELDS``) or of its
    ``LabSettings`` (every field), the flat form in which ``LabLaunch`` reads both."""

    family: str
    field: str
    model: type[BaseModel]

    @property
    def annotation(self) -> Any:
        return self.model.model_fields[self.field].annotation

    @property
    def link_setting(self) -> bool:
        """Whether it is one of the family's link settings (else a lab-only one)."""
        return self.model is SETTINGS_MODELS.get(self.family)


def _family_arguments_declared() -> dict[str, FamilyArgument]:
    found = {}
    for name, module in FAMILY_SETTINGS.items():
        for field in getattr(module, "LAUNCH_FIELDS", ()):
            found[lab_argument(name, field)] = FamilyArgument(name, field, module.Settings)
        if name in LAB_SETTINGS_MODELS:
            for field in LAB_SETTINGS_MODELS[name].model_fields:
                found[lab_argument(name, field)] = FamilyArgument(name, field, LAB_SETTINGS_MODELS[name])
    return found


FAMILY_LAUNCH_ARGUMENTS: dict[str, FamilyArgument] = _family_arguments_declared()

# Launch argument name -> kind. Kinds: str, int, bool, list, plan, family (a family's own argument,
# typed by its settings model: FAMILY_LAUNCH_ARGUMENTS) and the ones resolved later (distro, ...).
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
    "keystore": "str",
    "trial_dir": "str",
    "network_interface": "str",
    "base_interface": "str",
    "relay": "bool",
    "robot_traffic": "str",
    "start_router": "start_router",
    "start_broker": "start_broker",
    "record_ros2bag": "bool",
    "base_namespace": "base_namespace",
    "clock_source": "clock_source",
    "dry_run": "bool",
    "clock_port": "int",
    **dict.fromkeys(FAMILY_LAUNCH_ARGUMENTS, "family"),
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
        cfg = LabLaunch.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        reason = first["msg"].removeprefix("Value error, ")
        raise LaunchArgError(f"launch argument {where + ': ' if where else ''}{reason}") from None
    problem = registry.lab_launch_problem(cfg)
    if problem:
        raise LaunchArgError(f"launch argument {problem}")
    return cfg


def _resolve_auto(values: dict[str, Any], deferred: dict[str, str], role: Role) -> None:
    """Arguments whose default depends on others: 'auto' or absent picks the sensible value."""
    middleware = values.get("middleware", "dds")
    cmd = deferred.get("cmd_type", AUTO)
    values["cmd_type"] = BASE_CMD_TYPE[values["ros_distro"]] if cmd in ("", AUTO) else cmd
    _family_arguments(values, deferred)
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
        values["clock_source"] = registry.get(middleware).lab_clock_source
    elif clock not in ("", AUTO):
        values["clock_source"] = clock


def _family_arguments(values: dict[str, Any], deferred: dict[str, str]) -> None:
    """The families' launch arguments, typed by their settings models. One that has a lab default
    for the launch's security (its family's ``lab_defaults``: MQTT's port) takes it when left out
    or ``auto``; the others keep their settings' own default when left out."""
    security = values.get("security", "none")
    for name, argument in FAMILY_LAUNCH_ARGUMENTS.items():
        text = deferred.get(name)
        defaults = _lab_defaults(argument.family, security) if argument.link_setting else {}
        if argument.field in defaults and text in (None, "", AUTO):
            values[name] = defaults[argument.field]
        elif text is not None:
            values[name] = _typed(name, text, argument.annotation)


def _typed(name: str, text: str, annotation: Any) -> Any:
    """A launch argument's text as its settings field's type: a bool, a whole number, a list
    (comma or semicolon separated) or the text itself."""
    if annotation is bool:
        return _bool(name, text)
    if annotation is int:
        return _int(name, text)
    if get_origin(annotation) is list:
        return [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]
    return text


def _lab_defaults(family: str, security: str) -> dict[str, Any]:
    """What family ``family``'s settings default to in the lab with ``security`` where they differ
    from the twin's (its settings module's ``lab_defaults``)."""
    lab_defaults = getattr(FAMILY_SETTINGS[family], "lab_defaults", None)
    return lab_defaults(security) if lab_defaults else {}


def _base_namespace(values: dict[str, Any], deferred: dict[str, str], environ: Mapping[str, str]) -> str:
    """``base_namespace:=auto``: where the TurtleBot 4 puts the Create 3 for this distro; a
    TurtleBot 4 in discovery-server mode exports ROS_DISCOVERY_SERVER (turtlebot4_setup
    etc/turtlebot4/setup.bash) and hides the base on Humble too."""
    from fieldtest.labrun.nodelogic.create3params import create3_base_namespace

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


def with_lab_defaults(request: TrialRequest) -> TrialRequest:
    """``request`` with the families' lab defaults for the link settings it leaves open (MQTT's
    port by security: ``_lab_defaults``), so trial.yaml records what ran."""
    transport = request.transport
    for family, model in SETTINGS_MODELS.items():
        given = transport.settings(model).model_fields_set
        open_ = {k: v for k, v in _lab_defaults(family, transport.security).items() if k not in given}
        if open_:
            transport = transport.with_settings(model, **open_)
    if transport is request.transport:
        return request
    return request.model_copy(update={"transport": transport})


def family_launch_values(transport: TransportConfig) -> dict[str, str]:
    """The families' launch arguments of their link settings (``LAUNCH_FIELDS``) as ``transport``
    sets them (a trial's lab-only settings, ``LabSettings``, come from the sides' extra arguments)."""
    values = {}
    for name, argument in FAMILY_LAUNCH_ARGUMENTS.items():
        if argument.link_setting:
            value = getattr(transport.settings(argument.model), argument.field)
            values[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return values


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
    t = with_lab_defaults(request).transport
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
        **family_launch_values(t),  # zenoh_port, mqtt_port, ...: each family's link settings
        "keystore": t.keystore,
        "trial_dir": str(trial_dir),
        # what the bridges carry besides the kit's topics
        "robot_traffic": request.robot_traffic,
    }
    args.update(extra or {})
    checked = {k: v for k, v in args.items() if role != "robot" or k not in PREFLIGHT_ARGUMENTS}
    parse_launch_args(checked, role, environ={})  # fail here, before anything starts
    return args
