"""The shared lab launch types: ``LabLaunch``, one side's checked launch settings, which the lab
(``fieldtest.labrun``), each family's lab side (``fieldtest.middleware.<family>.lab``) and the twin's
bridged path read, and ``SideProcess``, one process a launch starts besides the kit's node.

``fieldtest.labrun.configuration.launchsettings`` turns launch arguments into a ``LabLaunch`` and then asks
the middleware (``fieldtest.middleware.registry.lab_launch_problem``) what it refuses: ``LabLaunch``
checks only what holds for every middleware, so the family packages, which read it, are not below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, model_validator

from fieldtest.catalog import LAB_MIDDLEWARES, family, in_family
from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import FamilySettingsHolder, Role, family_modules
from fieldtest.names import BASE_CMD_TYPE, ROBOT_TRAFFIC_PRESETS
from fieldtest.plan import SquarePlan
from fieldtest.qos import QosError, get_qos
from fieldtest.record.recordnames import CMD_VEL_TOPIC, RELAY_CMD_VEL_TOPIC

CLOCK_UDP_PORT = 15131  # the host's UDP clock responder (clock_source:=udp); open it in a firewall

ROS_DISTROS = ("humble", "jazzy")
_ROS_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)*/?$")  # a leading _ marks hidden names


class LaunchArgError(FieldtestError, ValueError):
    """A launch argument that cannot be used; the message is one line naming the argument."""


# Family name -> its ``LabSettings``: what only its lab side reads from a launch (no link setting,
# not in trial.yaml), for every family whose settings module declares one. The launch arguments
# are ``<family>_<field>`` (``mqtt_inject_timestamp:=``).
LAB_SETTINGS_MODELS: dict[str, type[BaseModel]] = {
    name: module.LabSettings
    for name, module in family_modules("settings").items()
    if hasattr(module, "LabSettings")
}
# Family name -> the fields of its LabSettings that a launch of another family's middleware
# refuses when set, with the reason (its settings module's ``LAB_OWN_FAMILY_ONLY``).
LAB_OWN_FAMILY_ONLY: dict[str, dict[str, str]] = {
    name: module.LAB_OWN_FAMILY_ONLY
    for name, module in family_modules("settings").items()
    if hasattr(module, "LAB_OWN_FAMILY_ONLY")
}
LabSettingsModel = TypeVar("LabSettingsModel", bound=BaseModel)


def lab_argument(family_name: str, field: str) -> str:
    """The launch argument of a family's setting: ``<family>_<field>``."""
    return f"{family_name.replace('-', '_')}_{field}"


class LabLaunch(FamilySettingsHolder):
    """Everything one side's launch file needs to start its processes. Each family's link settings
    (``settings(zenoh.Settings).port``, ...) come from the flat launch arguments (``zenoh_port:=``)."""

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
    keystore: str = ""
    trial_dir: str = ""  # where this side records; empty = do not record
    network_interface: str = ""  # the Wi-Fi/Ethernet interface DDS uses between machines (e.g. wlan0)
    base_interface: str = ""  # robot only: the Pi's link to the Create 3 (usb0 on a TurtleBot 4)
    relay: bool = (
        False  # robot link monitor relays commands to the base (host then sends on fieldtest/cmd_vel)
    )
    # the robot's own topics the bridges also carry to the host (fieldtest.robottraffic presets):
    # an operator's RViz or Foxglove on the host sees them only if the bridge routes them
    robot_traffic: Literal[ROBOT_TRAFFIC_PRESETS] = "none"  # type: ignore[valid-type]  # a tuple of names: pydantic checks it
    start_router: bool = False  # host: run the Zenoh router (zenoh-router) / rmw_zenohd here
    start_broker: bool = False  # host: run Mosquitto here (mqtt-local-broker)
    record_ros2bag: bool = True  # also run `ros2 bag record` of this side's topics
    base_namespace: str = ""  # robot: the Create 3's own namespace (create3_base_namespace)
    # where the latency's clock offset is measured: over the trial's link, or plain UDP (labrun.udpclock)
    clock_source: Literal["link", "udp"] = "link"
    clock_port: int = Field(CLOCK_UDP_PORT, ge=1, le=65535)
    # the base is not driven: the host streams on the relay's topic, the link monitor logs and does
    # not forward (a rehearsal of the whole command path on the lab day; implies relay's topics)
    dry_run: bool = False
    # Every family's LabSettings by family name, read from the flat ``<family>_<field>`` arguments.
    lab_families: dict[str, SerializeAsAny[BaseModel]] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _family_lab_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "lab_families" in data:
            return data
        data = dict(data)
        lab_families = {}
        for name, model in LAB_SETTINGS_MODELS.items():
            given = {
                field: data.pop(lab_argument(name, field))
                for field in model.model_fields
                if lab_argument(name, field) in data
            }
            try:
                lab_families[name] = model.model_validate(given)
            except ValueError as exc:  # pydantic's ValidationError: one line naming the argument
                first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
                field = str(first["loc"][0]) if first["loc"] else "?"
                raise ValueError(f"{lab_argument(name, field)}: {first['msg']}") from None
        data["lab_families"] = lab_families
        return data

    def lab_settings(self, model: type[LabSettingsModel]) -> LabSettingsModel:
        """The lab settings of the family whose ``LabSettings`` is ``model``
        (``cfg.lab_settings(mqtt.LabSettings).inject_timestamp``)."""
        for name, known in LAB_SETTINGS_MODELS.items():
            if known is model:
                return cast(LabSettingsModel, self.lab_families[name])
        raise KeyError(f"{model.__module__}.{model.__qualname__} is no family's LabSettings")

    def foreign_lab_setting(self) -> str:
        """Why a family's lab setting that only its own middlewares use is set away from its
        default for this launch's middleware of another family (one line naming the argument), or ""."""
        for name, fields in LAB_OWN_FAMILY_ONLY.items():
            if family(self.middleware) == name:
                continue
            settings = self.lab_families[name]
            for field, why in fields.items():
                default = type(settings).model_fields[field].get_default(call_default_factory=True)
                if getattr(settings, field) != default:
                    names = ", ".join(in_family(name))
                    return f"{lab_argument(name, field)}: only used with middleware {names} ({why})"
        return ""

    @model_validator(mode="after")
    def _check(self) -> LabLaunch:
        if self.dry_run:
            self.relay = True  # commands on fieldtest/cmd_vel, which the base does not hear
        if self.middleware not in LAB_MIDDLEWARES:
            raise ValueError(
                f"middleware: unknown {self.middleware!r} (choose from {', '.join(LAB_MIDDLEWARES)})"
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
        if self.security != "none" and not self.keystore:
            raise ValueError(f"keystore: security {self.security!r} needs keystore:=<path>")
        reason = _standstill_command_type(self)
        if reason:
            raise ValueError(reason)
        return self

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


@dataclass(frozen=True)
class SideProcess:
    """One process a launch file starts besides the kit's node."""

    name: str
    argv: list[str]
    env: dict[str, str]
    config_files: dict[str, str]  # file name -> content, written before the process starts


def write_config_files(processes: list[SideProcess], config_dir: str | Path) -> list[Path]:
    folder = Path(config_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for proc in processes:
        for name, text in proc.config_files.items():
            path = folder / name
            path.write_text(text)
            written.append(path)
    return written
