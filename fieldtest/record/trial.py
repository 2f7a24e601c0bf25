"""The trial record: one directory per trial, described by ``trial.yaml`` (see docs/trial-format.md).

<trial>/trial.yaml      what was asked (request) and what happened (outcome)
<trial>/host/           rosbag2 MCAP: commands as the host sent them (host clock)
<trial>/robot/          rosbag2 MCAP: commands as the robot received them, clock offsets (robot clock)
<trial>/mocap/          rosbag2 MCAP: ground-truth poses and per-frame status (recorder clock = host)
<trial>/analysis/       written by ``fieldtest analyze``
"""

from __future__ import annotations

import datetime as dt
import platform
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.dds.settings import Settings as DdsSettings
from fieldtest.names import NATNET_COMMAND_PORT, NATNET_DATA_PORT, ROBOT_TRAFFIC_PRESETS
from fieldtest.plan import SquarePlan, validation_message

from .recordnames import TRIAL_FILE, TRIAL_FORMAT_VERSION

EndReason = Literal[
    "completed", "host-stopped", "host-killed", "robot-exited", "geofence", "interrupted", "error", "running"
]
ClockSharing = Literal["shared", "separate"]
# Which machines of a twin trial sit on the emulated link (docs/networks.md, "Topology"): a named
# placement, or the nodes themselves ("broker" and "router" both name the middleware's own
# router/broker machine, where it has one)
TopologyName = Literal["seed", "robot-only", "all"]
TopologyNode = Literal["host", "robot", "broker", "router"]
RobotTraffic = Literal[ROBOT_TRAFFIC_PRESETS]  # type: ignore[valid-type]  # fieldtest.robottraffic.PRESETS


class TrialFormatError(FieldtestError, ValueError):
    """A trial directory or trial.yaml that cannot be used; the message names the file."""


class TwinSettings(BaseModel):
    """Digital-twin robot and mocap settings (ignored for a real robot)."""

    model_config = ConfigDict(extra="forbid")

    safety_override: Literal["none", "backup_only", "full"] = "full"
    wheel_speed_error: float = 0.0  # relative error of both wheels, e.g. 0.01 = +1 %
    heading_bias_dps: float = 0.0  # constant yaw-rate bias
    slip: float = 0.0  # std of relative per-step wheel slip
    # the base's systematic errors (fieldtest.basevariation): set them, or draw a robot instance
    # with ``robot_variation: <seed>`` (the drawn values are written beside it); default nominal
    wheel_diameter_ratio: float = Field(1.0, gt=0.9, lt=1.1)  # D_right / D_left
    wheelbase_ratio: float = Field(1.0, gt=0.8, lt=1.2)  # actual / nominal wheel separation
    turn_slip: float = Field(0.0, ge=0.0, lt=0.5)  # fraction of the yaw rate lost while turning
    robot_variation: int | None = None
    robot_clock_offset_s: float = 0.0  # the twin robot's clock runs this far ahead of the host's
    mocap_rate_hz: float = 120.0
    mocap_noise_m: float = 0.0002
    mocap_dropout: float = 0.0  # probability that a frame is tracking-invalid
    mocap_latency_s: float = Field(0.0, ge=0.0)  # a frame leaves the emulator this long after its exposure
    mocap_up_axis: Literal["y", "z"] = "y"
    # Where the twin's processes meet on this machine (the runner picks free ports per trial).
    natnet_address: str = "127.0.0.1"  # NatNet server address (unicast) the recorder talks to
    natnet_command_port: int = NATNET_COMMAND_PORT
    natnet_data_port: int = NATNET_DATA_PORT
    natnet_multicast: bool = False  # stream to 239.255.42.99 instead of unicast
    truth_port: int = 0  # UDP port where the twin robot sends its true pose to the NatNet emulator
    truth_socket: str = ""  # or a Unix socket path for it (crosses network namespaces)

    @model_validator(mode="after")
    def _draw_robot_variation(self) -> TwinSettings:
        """A ``robot_variation`` seed fills the base's errors from its draw; values set beside it
        must be that draw (as trial.yaml records them)."""
        if self.robot_variation is None:
            return self
        from fieldtest.basevariation import NOMINAL, draw

        drawn = draw(self.robot_variation)
        for name, value in drawn.items():
            current = getattr(self, name)
            if current not in (NOMINAL[name], value):
                raise ValueError(
                    f"twin.{name} {current} differs from twin.robot_variation {self.robot_variation}'s "
                    f"{value}: set one of them"
                )
            object.__setattr__(self, name, value)
        return self

    def has_imperfections(self) -> bool:
        """Whether the robot model is set to drive imperfectly (then it drifts by itself)."""
        return bool(
            self.wheel_speed_error
            or self.heading_bias_dps
            or self.slip
            or self.turn_slip
            or self.wheel_diameter_ratio != 1.0
            or self.wheelbase_ratio != 1.0
        )


class TrialRequest(BaseModel):
    """What the trial was asked to do."""

    model_config = ConfigDict(extra="forbid")

    name: str = "trial"
    plan: SquarePlan = Field(default_factory=SquarePlan)
    transport: TransportConfig = Field(default_factory=TransportConfig)
    network: str = "loopback"  # a link profile name, or "lab" for a real network
    robot_model: str = "twin-create3"  # or "turtlebot4-standard", "turtlebot4-lite"
    cmd_type: Literal["twist_stamped", "twist"] = "twist_stamped"
    repetition: int = 0
    seed: int = 0
    twin: TwinSettings = Field(default_factory=TwinSettings)
    rigid_body_id: int = 1
    # Twin: which machines sit on the network's emulated link, the rest wired. "seed" (default): as
    # the seed study, host and robot on it, and on a cellular profile (4g) the router/broker on a leg
    # of its own; "robot-only": the robot alone (the profile is then the whole host-robot path);
    # "all": every one of host, robot and router/broker; or a list of those nodes.
    topology: TopologyName | list[TopologyNode] = "seed"
    # Link faults, seconds from stream start: {"kind": "outage", "at_s": 10, "duration_s": 2} or
    # {"kind": "profile", "at_s": 30, "profile": "wifi-lossy"} (needs an emulated network).
    faults: list[dict[str, Any]] = Field(default_factory=list)
    # The robot's own traffic, a preset of TurtleBot 4 topics the robot publishes and the host pulls
    # as an operator's RViz or Foxglove would (fieldtest.robottraffic; "none": the commands alone).
    # Twin: the simulated robot sends it; lab: both launches' bridges carry it (robot_traffic:=)
    robot_traffic: RobotTraffic = "none"

    @model_validator(mode="after")
    def _robot_traffic_unsecured(self) -> TrialRequest:
        """The keystore's permissions and ACLs grant the kit's own topics only: a secured trial
        would refuse (or silently drop) the robot's topics, so the combination is refused here."""
        if self.robot_traffic != "none" and self.transport.security != "none":
            raise ValueError(
                f"robot_traffic {self.robot_traffic!r} with transport.security "
                f"{self.transport.security!r}: the security settings grant only the kit's own topics; "
                "set robot_traffic: none or security: none"
            )
        return self

    @model_validator(mode="after")
    def _discovery_has_multicast(self) -> TrialRequest:
        """Multicast discovery on a link that drops multicast would leave the robot unreached (or
        lost when its participants' leases run out after a fault): refused before the trial."""
        dds = self.transport.own_settings(DdsSettings)
        if dds is None or dds.discovery in ("none", "server"):  # server: unicast to the server
            return self
        for where, profile in [
            ("network", self.network),
            *(("faults", f.get("profile")) for f in self.faults),
        ]:
            if _drops_multicast(profile):
                raise ValueError(
                    f"transport.dds.discovery {dds.discovery!r} needs multicast, which the "
                    f"{where} profile {_profile_name(profile)!r} drops: set transport.dds.discovery: none"
                )
        return self


def _drops_multicast(profile: Any) -> bool:
    """Whether a link profile (name or fields) is known and drops multicast; others are for the runner."""
    if profile is None or profile in ("loopback", "lab"):
        return False
    from fieldtest.netem.profiles import ProfileError, get_profile  # here: trial.yaml readers skip it

    try:
        return not get_profile(profile).multicast
    except (ProfileError, ValueError, TypeError):
        return False


def _profile_name(profile: Any) -> str:
    return str(profile.get("name", "custom")) if isinstance(profile, dict) else str(profile)


class TrialOutcome(BaseModel):
    """What happened: times per clock (ns since the epoch), estimates, warnings, how it ended."""

    model_config = ConfigDict(extra="forbid")

    end_reason: EndReason = "running"
    end_detail: str = ""
    started_ns: dict[str, int] = Field(default_factory=dict)  # clock name -> time
    stopped_ns: dict[str, int] = Field(default_factory=dict)
    stream_start_ns: int | None = None  # host clock time of plan tick 0
    clock_offset_s: float | None = None  # robot estimate of host - robot clock
    clock_round_trip_s: float | None = None
    # "shared": every process read one clock (a twin trial: CLOCK_MONOTONIC is one per machine, in
    # network namespaces or not; the twin runner sets it); "separate": one per machine (the lab, and
    # records from before this field)
    clocks: ClockSharing = "separate"
    # per process: its clock's reading minus CLOCK_MONOTONIC (ns); on a shared clock, host - robot exactly
    clock_bases_ns: dict[str, int] = Field(default_factory=dict)
    software: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    cpu: dict[str, dict[str, float]] = Field(default_factory=dict)  # process -> {cpu_s, cpu_percent}
    link: dict[str, Any] = Field(default_factory=dict)  # measured link before the trial
    faults: list[dict[str, Any]] = Field(default_factory=list)  # scheduled outages / profile changes
    nodes: dict[str, str] = Field(default_factory=dict)  # twin: each machine -> its link (profile or "wired")
    # twin DDS cases: the discovery the participants ran (spdp, all, none), which is "none" (unicast
    # peers) on loopback whatever transport.dds.discovery asked; null for other middlewares
    dds_discovery: str | None = None
    # twin DDS cases: the DDS library each side ran ({"host": "cyclonedds", "robot": "fastdds"});
    # the robot's is the other vendor's where transport.dds.robot_vendor asked for it
    dds_vendors: dict[str, str] = Field(default_factory=dict)
    # twin, emulated network: packets and bytes per second by kind on the robot's link, from a
    # capture (fieldtest.netem.linktraffic; docs/trial-format.md)
    link_traffic: dict[str, Any] = Field(default_factory=dict)
    # twin, robot_traffic other than none: the preset, per topic what the robot sent and the host
    # received (fieldtest.twin.trafficpubsub), and on DDS the ROS graph the robot announced
    robot_traffic: dict[str, Any] = Field(default_factory=dict)
    # the stack's own timing faults, apart from the link: machine (steal, pressure, reference timer),
    # robot (receive-to-apply, physics steps), mocap (emulator frames skipped late)
    stack: dict[str, Any] = Field(default_factory=dict)
    # lab trials: the robot recording's end, clock sync state, offset source, arrival stamp
    # (docs/trial-format.md, "Lab trials")
    lab: dict[str, Any] = Field(default_factory=dict)
    # a campaign run on a cluster (``fieldtest campaign --cluster``): the worker that ran the trial,
    # its machine, capabilities and headroom, and the kit's version (docs/trial-format.md)
    worker: dict[str, Any] = Field(default_factory=dict)


class TrialRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format_version: int = TRIAL_FORMAT_VERSION
    trial_id: str
    request: TrialRequest
    outcome: TrialOutcome = Field(default_factory=TrialOutcome)

    def shared_clock_offset_s(self) -> float | None:
        """Host clock - robot clock where every process read one clock (twin), else None.

        From the processes' clock bases; a shared-clock record without them (a process did not get
        to write its outcome) falls back to the twin robot's configured shift."""
        outcome = self.outcome
        if outcome.clocks != "shared":
            return None
        bases = outcome.clock_bases_ns
        if "host" in bases and "robot" in bases:
            return (bases["host"] - bases["robot"]) / 1e9
        return -self.request.twin.robot_clock_offset_s


def software_versions() -> dict[str, str]:
    from importlib import metadata  # here: importing it costs a reader of trial.yaml 15 ms

    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("fieldtest", "cyclonedds", "eclipse-zenoh", "paho-mqtt", "rosbags", "mcap", "evo", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


def new_trial_id(name: str) -> str:
    return f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{name}"


def write_trial(trial_dir: Path, record: TrialRecord) -> Path:
    """Write trial.yaml atomically (a reader never sees half a file)."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    path = trial_dir / TRIAL_FILE
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(record.model_dump(mode="json"), sort_keys=False))
    tmp.replace(path)
    return path


def read_trial(trial_dir: str | Path) -> TrialRecord:
    path = Path(trial_dir) / TRIAL_FILE
    if not path.is_file():
        raise TrialFormatError(f"{path}: missing (is {trial_dir} a trial directory?)")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TrialFormatError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise TrialFormatError(f"{path}: expected a mapping at the top level")
    version = raw.get("format_version")
    if version != TRIAL_FORMAT_VERSION:
        raise TrialFormatError(
            f"{path}: unknown format_version {version!r} (this kit reads version {TRIAL_FORMAT_VERSION})"
        )
    try:
        return TrialRecord.model_validate(raw)
    except ValidationError as exc:
        raise TrialFormatError(f"{path}: {validation_message(exc)}") from None
