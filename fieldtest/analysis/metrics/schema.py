"""The schema of metrics.json: what ``analyze_trial`` writes and every reader reads through it.

``read_metrics(path)`` gives a validated ``Metrics`` (or raises ``MetricsError``, one line naming the
file); ``analyze_trial`` builds the same ``Metrics`` from typed sections and writes it with
``as_json``. Sections keep the
keys the schema does not name (``extra="allow"``): the schema types what the readers use, the rest
travels unchanged. Field list and units: docs/analysis.md, "metrics.json".

Version history: 1, the first; its later files also carry ``stack`` and ``drift_causes`` (optional
here). 2 adds ``stack.forwarding``, the router's or broker's own forwarding delay. A change to the
written format bumps ``METRICS_VERSION``; ``read_metrics`` then keeps reading the versions listed in
``READABLE_VERSIONS``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from fieldtest.analysis.loading.mocaptime import MocapTime
from fieldtest.analysis.loading.trialrobot import BaseCalibration
from fieldtest.errors import FieldtestError
from fieldtest.plan import validation_message

METRICS_VERSION = 2
READABLE_VERSIONS = (1, 2)
METRICS_FILE = "metrics.json"


class MetricsError(FieldtestError, ValueError):
    """A metrics.json that cannot be read: unreadable, not JSON, unknown version or wrong shape."""


class Section(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Stats(Section):
    """A statistics object: count, median, mean, std, min, max and percentiles (docs/analysis.md)."""

    count: int = 0
    median: float | None = None
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p90: float | None = None
    p99: float | None = None
    p99_99: float | None = None


class PlanSummary(Section):
    """The trial's square plan as the readers of metrics.json use it (fieldtest.plan.SquarePlan)."""

    laps: int
    lap_s: float
    side_m: float
    linear_speed_mps: float
    turn_rate_dps: float
    command_rate_hz: float
    start_delay_s: float
    turn_direction: str  # left: counter-clockwise


class TrialInfo(Section):
    dir: str
    trial_id: str
    name: str
    middleware: str
    zenoh_path: str = ""
    mqtt_nagle: bool | None = None  # MQTT cases: Nagle's algorithm on the clients (None: not MQTT)
    variant: str = ""  # settings beyond middleware/security/network, e.g. "Nagle off" ("" = default)
    topology: str = (
        ""  # twin: which machines sit on the emulated link ("seed", "robot-only", "host+robot" ...)
    )
    security: str
    qos: str
    network: str
    repetition: int
    seed: int | None = None
    robot_model: str
    robot: str = ""  # which robot: the model, and in the twin its drawn instance (fieldtest.analysis.loading.trialrobot.robot_label)
    cmd_type: str
    stream_start_ns: int | None = None
    plan: PlanSummary


class Outcome(Section):
    end_reason: str
    end_detail: str = ""
    warnings: list[str] = []
    link: dict[str, Any] = {}
    cpu: dict[str, Any] = {}
    clock_offset_s: float | None = None
    clock_round_trip_s: float | None = None
    nodes: dict[str, str] = {}
    software: dict[str, str] = {}


class Progress(Section):
    laps_planned: int
    laps_commanded: int
    laps_observed: int
    laps_completed: int
    commands_planned: int
    last_seq_sent: int | None = None
    last_seq_received: int | None = None
    ended_early: bool

    @property
    def complete(self) -> bool:
        """Every planned lap completed: only then is a drift between lap 1 and the last comparable."""
        return self.laps_completed == self.laps_planned


class BagState(Section):
    """How a trial's bag read (fieldtest.analysis.loading.trialdata.BagStatus)."""

    name: str
    path: str
    present: bool = False
    truncated: bool = False
    problem: str = ""
    topics: dict[str, int] = {}  # topic -> messages read


class Inputs(Section):
    bags: dict[str, BagState] = {}
    up_axis: str = "z"
    max_bridged_gap_s: float | None = None


class LapDrift(Section):
    lap: int
    mean_m: float | None = None
    rms_m: float | None = None
    max_m: float | None = None
    at_lap_end_m: float | None = None


class Closing(Section):
    end_pose: str = ""  # what the last lap's end is compared as ("rest after the run", ...)
    distance_m: float | None = None
    dx_m: float | None = None
    dy_m: float | None = None
    heading_deg: float | None = None


class Corner(Section):
    corner: int
    dx_m: float | None = None
    dy_m: float | None = None
    distance_m: float | None = None


class Drift(Section):
    # in the order the analysis writes them (metrics.json keeps it)
    available: bool
    reason: str = ""
    first_lap: int | None = None
    last_lap: int | None = None
    grid_step_s: float | None = None
    grid_points: int | None = None
    excluded_points: int | None = None
    mean_m: float | None = None
    rms_m: float | None = None
    max_m: float | None = None
    at_lap_end_m: float | None = None
    heading_change_deg: float | None = None
    heading_change_at_lap_end_deg: float | None = None
    per_lap: list[LapDrift] = []
    corners: list[Corner] = []
    closing: Closing | None = None


class Ape(Section):
    available: bool
    reason: str = ""
    tool: str = ""
    relation: str = ""
    alignment: str = ""
    poses: int | None = None
    window_s: list[float] | None = None  # the stream seconds compared: motion start, end
    rmse_m: float | None = None
    mean_m: float | None = None
    median_m: float | None = None
    std_m: float | None = None
    min_m: float | None = None
    max_m: float | None = None
    sse_m2: float | None = None
    tum_files: list[str] = []  # with export_tum: reference and ground-truth TUM files


SHARED_CLOCK = "shared-clock"  # latency.clock.method where every process read one clock (the twin)


class RelativeAt(Section):
    """evo's RPE over pairs one distance of path apart; each figure a mapping rmse, mean, median, std,
    min, max (docs/analysis.md, "Relative error")."""

    name: str
    distance_m: float
    available: bool = False
    reason: str = ""
    pairs: int | None = None
    translation_m: dict[str, float] | None = None
    translation_pct: dict[str, float] | None = None
    rotation_deg: dict[str, float] | None = None
    rotation_deg_per_m: dict[str, float] | None = None


class Relative(Section):
    available: bool
    reason: str = ""
    tool: str = ""
    relation: str = ""
    pairs: str = ""  # how the pairs are chosen
    rel_delta_tol: float | None = None  # pairs' path within this fraction of the distance
    pose_step_s: float | None = None  # poses resampled to this step
    poses: int | None = None
    path_m: float | None = None
    distances: list[RelativeAt] = []
    tum_files: list[str] = []

    def at(self, name: str) -> RelativeAt | None:
        """The figures at a named distance ("side", "lap", "2 laps", "4 laps") if computed."""
        return next((d for d in self.distances if d.name == name and d.available), None)


class ClockCorrection(Section):
    method: str
    offset_s: float | None = None
    drift_ppm: float | None = None
    reference_robot_ns: int | None = None
    probes: int | None = None
    used: int | None = None
    window_s: float | None = None
    min_delay_s: float | None = None  # the fastest probe's delay: twice the offset's error bound
    span_s: float | None = None  # the probes used: from the first to the last
    residual_rms_s: float | None = None  # the probes about the fitted offset line (with a drift)
    residual_max_s: float | None = None
    clocks: str = ""  # "shared": every process read one clock
    samples: int | None = None  # robot-live: the robot's own offset estimates
    note: str = ""


class PathAsymmetry(Section):
    """The link measured before the trial, one way each direction (shared clock), and what its
    asymmetry does to an NTP-style offset."""

    host_to_robot_ms: float
    robot_to_host_ms: float
    asymmetry_ms: float
    ntp_error_bound_ms: float


class NtpEstimate(Section):
    """Shared-clock trials: what the NTP-style estimate, all the lab has, makes of the trial."""

    clock: ClockCorrection
    available: bool
    path_asymmetry: PathAsymmetry | None = None
    one_way_ms: Stats | None = None
    offset_error_ms: Stats | None = None
    median_error_ms: float | None = None


class FaultLatency(Section):
    """The commands inside one fault's span."""

    start_s: float
    duration_s: float
    commands_sent: int
    commands_lost: int
    max_one_way_ms: float | None = None


class Lateness(Section):
    """Commands sent in ros2-performance's classes against the command period (docs/analysis.md)."""

    period_ms: float
    late_threshold_ms: float
    too_late_threshold_ms: float
    commands: int
    on_time: int
    late: int
    too_late: int
    lost: int
    on_time_fraction: float | None = None
    late_fraction: float | None = None
    too_late_fraction: float | None = None
    lost_fraction: float | None = None


class Latency(Section):
    # in the order the analysis writes them (metrics.json keeps it)
    clock: ClockCorrection | None = None
    expected_from: str = ""
    send_interval_ms: Stats | None = None
    commands_sent: int | None = None
    last_seq_sent: int | None = None
    available: bool = False
    arrival_stamp: dict[str, Any] = {}  # lab: which arrival stamp the robot used, what it includes
    clock_offset_source: str = ""  # lab: the channel of the clock probes (link, udp); "" = the link
    receipts: int | None = None
    duplicates: int = 0
    out_of_order: int = 0
    commands_received: int | None = None
    last_seq_received: int | None = None
    unrecorded: int = 0  # sent after a dead robot logger's last receipt: fate unknown, not counted lost
    lost: int | None = None
    loss_ratio: float | None = None
    lost_spans: list[tuple[int, int]] = []
    received_not_sent: int | None = None
    sent_stamp_mismatches: int | None = None
    one_way_ms: Stats | None = None
    lateness: Lateness | None = None  # absent in files written before the classes
    # lost while the path's delay exceeded what the QoS's KEEP_LAST history holds (latency.py
    # lost_to_history_overflow): the history overwrote them; None: no host bag to tell
    lost_to_history_overflow: int | None = None
    lost_to_history_overflow_spans: list[tuple[int, int]] = []
    # lost while the robot's own reader took nothing as its KEEP_LAST history filled (readerstalls.py):
    # the Pi's stall, not the link's; None in files written before the count
    lost_to_reader_stalls: int | None = None
    lost_to_reader_stalls_spans: list[tuple[int, int]] = []
    one_way_live_ms: Stats | None = None
    interarrival_ms: Stats | None = None
    jitter_ms: float | None = None
    ipdv_ms: float | None = None
    round_trip_ms: Stats | None = None
    # shared-clock (twin) trials: the NTP-style estimate beside the true figure, with its error
    ntp_estimate: NtpEstimate | None = None
    live_offset_error_ms: Stats | None = None
    faults: list[FaultLatency] = []


class LapWindow(Section):
    lap: int
    start_s: float
    end_s: float


class MotionStart(Section):
    start_s: float | None = None
    first_command_s: float | None = None
    first_received_s: float | None = None
    start_lag_s: float | None = None
    start_after_receipt_s: float | None = None
    noise_floor_m: float | None = None
    body_yaw_offset_deg: float | None = None
    start_heading_deg: float | None = None
    start_xy_m: list[float] | None = None
    laps: list[LapWindow] = []


class LatenessSummary(Section):
    """How late a part ran: count, p50, p99 and max in ms (fieldtest.machine.lateness_summary)."""

    count: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


class TimingError(Section):
    """The commanded timing error (arrival - planned, about its median) and the machine's part of it
    (fieldtest.analysis.causes.stackfaults.timing_error_split)."""

    commands: int
    total_rms_ms: float
    host_emission_rms_ms: float
    path_rms_ms: float
    machine_rms_ms: float
    machine_share: float | None = None  # None when there is no error to share
    path_counted_as_machine: bool  # loopback: no emulated link, the path is the machine's too


class Stack(Section):
    """The stack's own timing faults; ``valid`` None when there are no figures to judge by. The
    per-part figures stay mappings (docs/analysis.md, "Stack faults in every twin trial")."""

    # in the order the analysis writes them (metrics.json keeps it)
    bound: dict[str, float] = {}
    machine: dict[str, Any] | None = None
    # None where the trial has no such part (a synthetic or lab trial has no twin robot, no emulator)
    robot: dict[str, Any] | None = None
    mocap: dict[str, Any] | None = None
    # the router's or broker's forwarding probe (fieldtest.twin.fwdprobe); None where there is none
    forwarding: dict[str, Any] | None = None
    # the ns-3 802.11 link's lag behind real time, its bound and CPU; None on other links (an
    # optional key: files with and without it read alike, so the version stays)
    link_simulator: dict[str, Any] | None = None
    # the userspace link forwarders' frames and lateness per node and direction, and the bound
    # (optional as link_simulator)
    link_forwarder: dict[str, Any] | None = None
    # on an emulated link the path's timing is the link's, not counted as the machine's
    link_emulated: bool | None = None
    host_emission_late: LatenessSummary | None = None
    timing_error: TimingError | None = None
    stack_drift_m: float | None = None
    valid: bool | None = None
    invalid_reasons: list[str] = []
    advice: str = ""
    # what the machine did that validity does not judge (CPU steal); optional as link_simulator
    cautions: list[str] = []


class BaseLateness(Section):
    median: float
    p99: float
    max: float


class BaseReceived(Section):
    """What the base received against what the host sent (fieldtest.analysis.metrics.basereceived);
    the counts are None where the base's messages carry no sequence number to tell."""

    available: bool
    reason: str = ""
    instead: str = ""  # lab: what stands in for the record a real Create 3 does not keep
    sent: int | None = None
    received: int | None = None
    received_types: list[str] = []
    moving_sent: int | None = None
    moving_received: int | None = None
    matched_by: str = ""
    missing: int | None = None
    missing_seq_first: list[int] = []
    reordered: int | None = None
    duplicates: int | None = None
    unknown_seq: int | None = None
    values_changed: int | None = None
    zeroed: int | None = None
    lateness_ms: BaseLateness | None = None
    warnings: list[str] = []
    source: str = ""
    note: str = ""


class RestSplit(Section):
    """The rest drift split by the robot's base calibration (fieldtest.analysis.causes.restsplit)."""

    calibration: BaseCalibration
    systematic_m: float | None = None
    residual_m: float | None = None


class StalledChange(Section):
    seq: int
    kind: str  # turn, side or stop
    excess_ms: float  # arrived this much later than the trial's median latency


class SegmentChanges(Section):
    """The segment changes and those a link stall held (fieldtest.analysis.causes.linkstalls)."""

    count: int
    median_latency_ms: float
    stall_excess_ms: float
    stalled_commands_fraction: float
    stalled: list[StalledChange] = []
    drift_if_on_time_m: float | None = None


class PhaseSpread(Section):
    """The arrival replay's drift with the trial's latencies shifted against the plan."""

    shifts: int
    median_m: float
    p10_m: float
    p90_m: float


class DriftCauses(Section):
    """The lap drift split into causes by replaying the Create 3 model (docs/analysis.md)."""

    # in the order the analysis writes them (metrics.json keeps it)
    available: bool
    reason: str = ""
    first_lap: int | None = None
    last_lap: int | None = None
    replay_drift_m: dict[str, float | None] = {}
    measured_drift_m: float | None = None
    host_emission_m: float | None = None
    link_m: float | None = None
    rest_m: float | None = None
    stack_m: float | None = None
    stack_includes_link: bool = False
    # the rest split into the base's systematic part and what is left; None without the robot's
    # calibration
    base: RestSplit | None = None
    # the arrival replay's closing error (dx, dy, start frame): what timing alone gives the closing
    replay_closing_m: list[float] | None = None
    # the segment changes (turn and side starts, the stop) and those that arrived in a stall, with
    # the arrival replay's drift had they been on time
    segment_changes: SegmentChanges | None = None
    # the arrival replay with the trial's latencies shifted against the plan: median, p10, p90
    phase_spread: PhaseSpread | None = None


class MocapSource(Section):
    topic: str
    bag: str
    clock: str  # the clock of the poses' stamps: host or robot


class Mocap(Section):
    """Frames lost, tracking-invalid frames and holes in the ground truth (docs/analysis.md, "Mocap
    gaps"); empty without ground truth, the frame counts only where the recorder kept the frames."""

    # in the order the analysis writes them (metrics.json keeps it)
    valid_poses: int | None = None
    frames: int | None = None
    tracking_valid: int | None = None
    tracking_invalid: int | None = None
    lost_in_transit: int | None = None
    frame_number_resets: int | None = None
    frame_number_jumps: int | None = None
    invalid_runs: int | None = None
    longest_invalid_run_frames: int | None = None
    rate_hz: float | None = None
    # the holes over the whole recording, then inside the analyzed window
    all_gaps: int | None = None
    all_missing_samples: int | None = None
    all_bridged_gaps: int | None = None
    all_excluded_gaps: int | None = None
    all_excluded_s: float | None = None
    all_longest_gap_s: float | None = None
    in_analysis_gaps: int | None = None
    in_analysis_missing_samples: int | None = None
    in_analysis_bridged_gaps: int | None = None
    in_analysis_excluded_gaps: int | None = None
    in_analysis_excluded_s: float | None = None
    in_analysis_longest_gap_s: float | None = None
    analysis_window_s: list[float] | None = None
    max_bridged_gap_s: float | None = None
    source: MocapSource | None = None
    dropped_non_finite: int | None = None
    time: MocapTime | None = None  # the poses' time axis


class Fault(Section):
    """One of ``outcome.faults`` in stream seconds; the keys the record had besides stay as they are."""

    # what the record says, then what follows from it
    kind: str
    start_s: float
    duration_s: float
    detail: str = ""
    end_s: float
    open_ended: bool = False  # no length recorded: it lasts to the end of the stream


class WireGroup(Section):
    packets: int
    bytes: int
    packets_per_s: float
    bytes_per_s: float


class PacketSizes(Section):
    median: int
    p95: int
    max: int


class WireKind(Section):
    packets_per_s: float
    bytes_per_s: float
    size_bytes: PacketSizes | None = None  # absent for a kind without packets


class SubmessagesPerPacket(Section):
    mean: float
    max: int


class WireDirection(Section):
    """One direction of the robot's link: fieldtest.netem.wire's counts, rates and shares."""

    overhead_packet_fraction: float | None = None  # None where TLS or DDS Security hides the samples
    reliability_packets_per_data_packet: float | None = None
    packets: int
    bytes: int
    groups: dict[str, WireGroup]
    rtps_submessages: dict[str, int] = {}
    tls_records: dict[str, int] = {}
    data_submessages_per_packet: SubmessagesPerPacket | None = None
    kinds: dict[str, WireKind] = {}  # the kinds seen, without their packet and byte counts


class Wire(Section):
    """The robot link's traffic per direction and kind (fieldtest.analysis.metrics.wiretraffic)."""

    duration_s: float
    node: str | None = None  # the node whose link was captured
    host_to_robot: WireDirection
    robot_to_host: WireDirection


class PercentileMs(Section):
    median: float
    p95: float


class TopicTraffic(Section):
    """One robot topic: what the robot sent (fieldtest.twin.trafficpubsub) and what the host got."""

    type: str = ""
    node: str = ""
    rate_hz: float | None = None
    size_bytes: int | None = None
    sent: int | None = None
    send_failures: int | None = None
    received: int | None = None
    bytes_received: int | None = None
    received_hz: float | None = None
    expected_in_span: int | None = None
    lost_in_span: int | None = None
    age_ms: PercentileMs | None = None  # capture stamp to arrival


class RosGraph(Section):
    participants: int
    nodes: list[str]


class RobotTraffic(Section):
    """The robot's own topics beside the commands (``outcome.robot_traffic`` as recorded)."""

    preset: str = ""
    topics: dict[str, TopicTraffic] = {}
    graph: RosGraph | None = None  # on DDS: the ROS graph the robot announced


class Metrics(Section):
    # in the order metrics.json writes them
    metrics_version: int
    trial: TrialInfo
    partial: bool
    partial_reasons: list[str]
    warnings: list[str]
    outcome: Outcome
    progress: Progress
    inputs: Inputs | None = None
    motion: MotionStart
    drift: Drift
    ape: Ape
    latency: Latency
    mocap: Mocap = Mocap()
    faults: list[Fault] = []
    robot_traffic: RobotTraffic | None = None  # None without robot traffic
    # None without a capture (an optional key: files with and without it read alike, so the version
    # stays)
    wire: Wire | None = None
    drift_causes: DriftCauses | None = None
    stack: Stack | None = None
    base: BaseReceived | None = None  # what the base received against what the host sent
    relative: Relative | None = None  # absent in files written before the relative error
    analysis_s: float | None = None
    files: list[str] = []
    plots: list[str] = []

    @property
    def valid(self) -> bool:
        """A trial counts unless its stack faults made it invalid (``stack.valid`` false)."""
        return self.stack is None or self.stack.valid is not False

    @property
    def config(self) -> tuple[str, str, str]:
        """(middleware, security, network): what compare groups trials by; a variant of the
        default set-up is named after the middleware, e.g. "mqtt-broker (Nagle off)"."""
        variant = f" ({self.trial.variant})" if self.trial.variant else ""
        return self.trial.middleware + variant, self.trial.security, self.trial.network


def metrics_from(data: Any, source: str | Path) -> Metrics:
    """Validate parsed metrics; ``MetricsError`` (one line naming ``source``) if they do not fit."""
    if not isinstance(data, dict):
        raise MetricsError(f"{source}: not a metrics object (a JSON object with metrics_version)")
    version = data.get("metrics_version")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(map(str, READABLE_VERSIONS))
        raise MetricsError(f"{source}: metrics_version {version!r}, this kit reads {readable}")
    try:
        return Metrics.model_validate(data)
    except ValidationError as exc:
        raise MetricsError(f"{source}: {validation_message(exc)}") from None


def as_json(section: BaseModel) -> dict[str, Any]:
    """A section or the whole metrics as metrics.json holds it: the keys it was given, JSON values."""
    return section.model_dump(mode="json", exclude_unset=True)


def read_metrics(path: str | Path) -> Metrics:
    """A metrics.json file, validated against the schema."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise MetricsError(f"{path}: not readable ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MetricsError(f"{path}: not JSON ({exc})") from None
    return metrics_from(data, path)
