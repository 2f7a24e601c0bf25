"""The shared lab launch types: ``LabLaunch``, one side's checked launch settings, which the lab
(``fieldtest.labrun``), each family's lab side (``fieldtest.middleware.<family>.lab``) and the twin's
bridged path read, and ``SideProcess``, one process a launch starts besides the kit's node.

``fieldtest.labrun.configuration.settings`` turns launch arguments into a ``LabLaunch``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import Role
from fieldtest.middleware import registry
from fieldtest.middleware.base import Middleware
from fieldtest.names import BASE_CMD_TYPE, MQTT_PORT, ROBOT_TRAFFIC_PRESETS, ZENOH_PORT
from fieldtest.plan import SquarePlan
from fieldtest.qos import QosError, get_qos
from fieldtest.record.names import CMD_VEL_TOPIC, RELAY_CMD_VEL_TOPIC
from fieldtest.security.settings import SecuritySettingError

CLOCK_UDP_PORT = 15131  # the host's UDP clock responder (clock_source:=udp); open it in a firewall

ROS_DISTROS = ("humble", "jazzy")
_ROS_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)*/?$")  # a leading _ marks hidden names


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
    robot_traffic: Literal[ROBOT_TRAFFIC_PRESETS] = "none"  # type: ignore[valid-type]  # a tuple of names: pydantic checks it
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
                    self.entry.security_setting(self.security)
                except SecuritySettingError as exc:
                    raise ValueError(f"security: {exc}") from None
        if self.dds_peers and not self.entry.lab_dds_crosses():
            raise ValueError(
                "dds_peers: only used with middleware dds (bridged cases keep DDS on each machine)"
            )
        for problem in (_standstill_command_type, _secure_dds_without_relay, self.entry.lab_launch_problem):
            reason = problem(self)
            if reason:
                raise ValueError(reason)
        return self

    @property
    def entry(self) -> Middleware:
        """The middleware's registry entry (what it declares for the lab)."""
        return registry.get(self.middleware)

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
    if cfg.security == "none" or not cfg.entry.lab_dds_crosses() or cfg.relay:
        return ""
    return (
        f"relay: security {cfg.security} on middleware {cfg.middleware} needs relay:=true on both "
        "sides (--host-arg relay=true --robot-arg relay=true): the Create 3 cannot join the SROS2 "
        "domain, so without the relay it never hears the host"
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
