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
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from fieldtest.catalog import LAB_MIDDLEWARES
from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import FamilySettingsHolder, Role
from fieldtest.names import BASE_CMD_TYPE, ROBOT_TRAFFIC_PRESETS
from fieldtest.plan import SquarePlan
from fieldtest.qos import QosError, get_qos
from fieldtest.record.recordnames import CMD_VEL_TOPIC, RELAY_CMD_VEL_TOPIC

CLOCK_UDP_PORT = 15131  # the host's UDP clock responder (clock_source:=udp); open it in a firewall

ROS_DISTROS = ("humble", "jazzy")
_ROS_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)*/?$")  # a leading _ marks hidden names


class LaunchArgError(FieldtestError, ValueError):
    """A launch argument that cannot be used; the message is one line naming the argument."""


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
    dds_peers: list[str] = Field(default_factory=list)  # static unicast discovery peers
    relay: bool = (
        False  # robot link monitor relays commands to the base (host then sends on fieldtest/cmd_vel)
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
