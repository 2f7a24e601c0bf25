"""Reference summaries: the small data files in ``reference/`` that the docs' figures come from.

One JSON file per benchmark run (never bags): the command that reproduces it, when it ran, the
machine and the software versions, and one row per figure set the docs quote, each row with the
machine's load, busy cores and CPU steal over its own measurement. ``tools/render_docs.py`` fills
the docs' generated blocks from them (``fieldtest.testkit.docblocks``), and a test keeps docs and
data in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from fieldtest.errors import FieldtestError

REFERENCE_DIR = "reference"


class ReferenceFormatError(FieldtestError, ValueError):
    """A reference file that is missing or does not match its schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Conditions(_Strict):
    """How busy the machine was over one row's measurement."""

    load_1min: float | None  # 1-minute load average at the row's start (None: /proc/loadavg unreadable)
    busy_percent: list[float]  # per core, or one figure for all cores
    steal_percent: float  # CPU time the hypervisor gave to others, all cores, over the row
    steal_max_percent: float | None = None  # the largest share in one sample (MachineMonitor)

    def text(self) -> str:
        busy = "/".join(f"{b:.0f}" for b in self.busy_percent)
        steal = f", steal {self.steal_percent:.1f} %" if self.steal_percent >= 0.05 else ""
        load = "?" if self.load_1min is None else f"{self.load_1min:.2f}"
        return f"load {load}, busy {busy} %{steal}"


class PerfOverheadRow(_Strict):
    """``benchmarks/bench_perf.py``: one size, one middleware; the native tool's and perf's round trip."""

    tool: Literal["dds", "fastdds", "zenoh"]
    message: str
    size_b: int
    native_rtt_mean_ms: float | None
    native_rtt_p50_ms: float | None
    perf_rtt_mean_ms: float | None
    perf_rtt_p50_ms: float | None
    throughput_ratio: float | None  # perf / native echoed bytes per second
    stages_ms: dict[str, float]  # perf's round trip by stage: out, decode, echo (means)
    error: str | None = None
    conditions: Conditions | None


class Wifi80211Row(_Strict):
    """``benchmarks/bench_wifi80211.py``: one link profile against its configuration."""

    profile: str
    configuration: str
    rtt_p50_ms: dict[int, float]  # by datagram size (B)
    rtt_p99_ms: dict[int, float]
    unicast_loss: dict[int, float]  # fraction
    multicast_delivered: dict[int, float]  # fraction
    link_cpu_percent: float  # of one core: ns-3, or the forwarders of the fast profiles
    # ns-3 profiles only
    unicast_retries_per_frame: float | None = None
    unicast_rates: list[str] = []  # the most used rates, most used first
    group_rates: list[str] = []
    group_retries_per_frame: float | None = None
    group_airtime_share: float | None = None
    lag_p99_ms: float | None = None
    lag_max_ms: float | None = None
    lag_bound_ms: float | None = None  # a twin trial is invalid when the lag's p99 passes it
    others_airtime_share: float | None = None  # the other stations' frames (profiles with other stations)
    conditions: Conditions


class ZenohBridgeRow(_Strict):
    """``benchmarks/bench_zenoh_bridge.py``: one path's one-way latency, pooled over its rounds."""

    path: str
    sent: int
    received: int
    min_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    added_min_ms: float | None  # over direct DDS in the same run
    added_p50_ms: float | None
    bridge_cpu_percent: float  # bridges + router, of one core
    conditions: Conditions  # the largest load, busy share and steal over the path's rounds


class TwinTrialRow(_Strict):
    """One twin trial as analyzed (``benchmarks/bench_twin.py``'s drift part: loopback, ideal robot)."""

    middleware: str
    network: str
    plan: str
    end_reason: str
    valid: bool | None  # the stack check's verdict (docs/analysis.md); None: nothing to judge by
    invalid_reasons: list[str] = []
    drift_mm: float | None = None  # lap drift, last lap against the first
    received: int = 0
    sent: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    error: str | None = None
    conditions: Conditions  # over the trials that ran at once


class ForwarderCostRow(_Strict):
    """``benchmarks/bench_netem.py``: the userspace forwarder against a plain veth, or one profile's link."""

    path: str  # "plain veth", "forwarder, ideal", "forwarder, blast", or a profile's name
    rtt_p50_ms: float | None  # None: a one-way blast
    rtt_p99_ms: float | None
    packets_per_s: float  # offered
    forwarder_cpu_percent: float | None  # of one core, the robot's forwarder; None: no forwarder
    configured_rtt_ms: float | None = None  # the profile's own round trip
    late_p50_us: list[int] = []  # the forwarder's scheduling lateness, per direction (a2b, b2a)
    late_p99_us: list[int] = []
    late_max_us: list[int] = []
    delivered: float | None = None  # fraction, blasts only
    conditions: Conditions


class SecurityCostRow(_Strict):
    """``benchmarks/bench_security.py``: one middleware with one security setting, pooled over passes."""

    middleware: str
    security: str
    p50_ms: float | None  # one-way, received - sent on the shared clock
    p99_ms: float | None
    run_p50_ms: list[float]  # each pass's own median: their spread is the noise
    offset_corrected_p50_ms: float | None
    cpu_percent: dict[str, float]  # of one core while the commands stream: robot, host, router, broker
    received: int
    sent: int
    errors: list[str] = []
    conditions: Conditions  # the largest load, busy share and steal over the row's trials


class RobotTrafficRow(_Strict):
    """``benchmarks/bench_robot_traffic.py``: one twin trial of one case."""

    case: str  # middleware[+preset][+express]
    repetition: int
    end_reason: str
    median_ms: float | None = None  # the commands' one-way latency (shared clock)
    p90_ms: float | None = None
    p99_ms: float | None = None
    lost: int | None = None
    sent: int | None = None
    drift_mm: float | None = None
    valid: bool | None = None  # the stack check (docs/analysis.md)
    invalid_reasons: list[str] = []  # why the stack check set the trial aside
    preview_received_hz: float | None = None  # the camera preview as the host received it
    topics_received_hz: dict[str, float | None] = {}  # each preset topic's rate over the host's arrivals
    topics_received: dict[str, int] = {}  # each preset topic's messages the host received
    topics_sent: dict[str, int] = {}  # and those the robot sent
    discovery_packets: int | None = None  # SPDP + SEDP on the robot's link
    # the ns-3 802.11 link (None or empty elsewhere), from the record's outcome.stack.link_simulator
    lag_p99_ms: float | None = None  # ns-3 behind real time
    lag_max_ms: float | None = None
    link_cpu_percent: float | None = None  # ns-3's own CPU time, of one core
    airtime_share: dict[str, float] = {}  # transmitter (ap, host, robot, others) -> its airtime / the run
    unicast_retries_per_frame: float | None = None
    group_per_s: float | None = None  # the access point's group frames
    group_frames_held: float | None = None  # group frames held to a DTIM beacon (power save)
    doze_share: dict[str, float] = {}  # station -> share of the run it dozed
    detail: str = ""
    conditions: Conditions


class ForwardingRow(_Strict):
    """``benchmarks/bench_forwarding.py``: one quick twin trial's forwarding probe through the router or broker."""

    middleware: str
    repetition: int
    end_reason: str
    rtt_p50_ms: float | None = None
    rtt_p99_ms: float | None = None
    rtt_max_ms: float | None = None
    samples: int = 0
    drift_mm: float | None = None
    realtime: dict[str, bool] = {}  # forwarder -> ran at SCHED_FIFO
    detail: str = ""
    conditions: Conditions  # the trial's own machine monitor


class AnalysisSpeedRow(_Strict):
    """``benchmarks/bench_analysis.py``: one command's time (best of its runs) in one condition."""

    measure: str  # analyze, analyze-no-plots, analyze-warm, evo-ape, compare-scratch, compare-cached, compare-process
    wall_s: float
    cpu_s: float | None  # user + system of the process and the children it waited for
    rate_hz: float | None = None  # the trial's ground truth rate (single-trial measures)
    busy_core: bool = False  # a spinning process kept one core busy
    trials: int | None = None  # compare measures
    conditions: Conditions


class NewcomerRow(_Strict):
    """``benchmarks/bench_newcomer.py``: one `make demo` from a fresh clone, empty home and cache."""

    repetition: int
    exit_code: int
    install_s: float | None  # from `make demo` to the install's "ready" line
    first_trial_s: float | None  # to the first trial's start
    verdict_s: float | None  # to the verdict line
    total_s: float
    verdict: str  # VALID, NOT VALID, validity unknown, none
    trials: int  # trial reports listed (the kept ones)
    invalid: int  # of them invalid
    reruns: int  # invalid trials re-run alone
    last_lines: list[str] = []  # a failed run's last output
    conditions: Conditions


class VpnCompareRow(_Strict):
    """``benchmarks/bench_vpn.py``: DDS with one protection (none, SROS2, OpenVPN) on one link and one
    payload size: Kim et al.'s latency (round trip / 2) and saturated throughput, over repetitions."""

    network: str
    protection: str  # "none", the SROS2 setting's name, or "openvpn"
    message: str
    size_b: int
    latency_ms: float | None  # round trip / 2: the mean over the repetitions of each row's mean
    latency_half95_ms: float | None  # half the 95 % interval of that mean (None: one repetition)
    throughput_mb_s: float | None  # received per second, one-way at 1000 Hz: the mean over the repetitions
    throughput_half95_mb_s: float | None
    runs_latency: int  # the repetitions that counted (ok, and the link emulator kept up)
    runs_throughput: int
    errors: list[str] = []
    conditions: Conditions  # the largest load, busy share and steal over the rows


Direction = Literal["up", "down", "none"]


class ReproductionRow(_Strict):
    """``benchmarks/bench_reproduction.py``: one seed finding beside the kit's like-for-like figure."""

    key: str  # Z1, F3, R1, C2, K1, ...
    claim: str
    study: str
    source: str  # the paper's table or figure
    seed_figure: str
    kit_mean: float | None  # over the repetitions (a ratio's: geometric), None: no figure
    kit_low: float | None  # its Student-t 95 % interval
    kit_high: float | None
    repetitions: int  # repetitions with a figure
    unit: str  # "x" for a ratio, " ms", " pp", ...
    digits: int
    seed_direction: Direction
    kit_direction: Direction | None  # where the kit's interval lies against the no-effect value
    reproduced: bool  # the kit's interval on the seed's side (computed, never chosen)
    rows_behind: str  # each perf row's figures over its repetitions
    conditions: str  # the rows' networks; load, busy cores and steal over them
    notes: str = ""
    verdict: str = ""  # where not yes/no: "not measurable here: <why>" or "not run" (computed)
    kit_middleware: str = ""  # the vendors of the kit's rows: CycloneDDS, Fast DDS, ...


class ChenSweepRow(_Strict):
    """``benchmarks/bench_chen_sweep.py``: one perf row on Chen's radio at one distance."""

    distance_m: float
    qos: str
    security: str
    status: str  # the perf row's: ok, failed, refused
    valid: bool | None  # the link kept up (fieldtest.perf.case.judge_row); None: not judged
    invalid_reasons: list[str] = []
    sent: int = 0
    one_way_loss: float | None = None  # fraction of pings the relay never got (Chen's loss)
    round_trip_loss: float | None = None  # fraction of pings whose echo never came back
    round_trip_p50_ms: float | None = None
    round_trip_p99_ms: float | None = None
    unicast_frames: int | None = None  # ns-3: unicast MPDUs on the air, retries included
    retries_per_frame: float | None = None  # ns-3: Retry-bit frames per unicast frame
    mac_drops: int | None = None  # ns-3: frames dropped at the retry limit or their lifetime
    rtps_packets: dict[str, int] = {}  # the robot link's RTPS packets: user data, reliability, protected
    lag_p99_ms: float | None = None
    error: str | None = None
    conditions: Conditions


class WirelessFindingsRow(_Strict):
    """``benchmarks/bench_wireless_findings.py``: one network and middleware of a twin campaign, over
    its valid repetitions (the stack check); the 802.11 mechanisms from ns-3's counts in each record."""

    network: str
    middleware: str
    valid: int
    invalid: int  # trials the stack check set aside (kept, not counted)
    invalid_reasons: list[str] = []  # each set-aside trial's reasons, one entry per trial
    seed_rtt_ms: float | None  # Zhang et al. Table 2, Array1k mean round trip on the seed's network
    rtt_ms: float | None  # the clock probes' mean round trip: the median over the repetitions
    rtt_low_ms: float | None  # its distribution-free interval (fieldtest.analysis.campaign.intervals)
    rtt_high_ms: float | None
    rtt_coverage: float | None
    one_way_median_ms: float | None  # the commands' (shared clock), medians over the repetitions
    one_way_p99_ms: float | None
    loss_pct: float | None
    drift_mm: float | None  # lap drift (drift.mean_m): the mean over the repetitions
    drift_low_mm: float | None  # its Student-t 95 % interval
    drift_high_mm: float | None
    drift_each_mm: list[float] = []  # each valid repetition's, in run order
    rtt_excess_ms: float | None = None  # the round trip beyond two one-way medians
    discovery_per_s: float | None = None  # DDS discovery packets on the robot's link, both ways
    # the ns-3 802.11 link (None elsewhere): medians over the repetitions
    group_per_s: float | None = None  # the access point's group frames
    group_airtime_share: float | None = None
    unicast_retries_per_frame: float | None = None
    others_airtime_share: float | None = None  # the other stations' frames
    group_frames_held: float | None = None  # group frames held to a DTIM beacon (power save)
    frames_held: dict[str, float] = {}  # station -> unicast frames the access point held while it dozed
    doze_share: dict[str, float] = {}  # station -> share of the run it dozed
    channel_access_mean_ms: dict[str, float] = {}  # station -> arrival at its MAC to first transmission
    channel_access_deferred: dict[str, float] = {}  # station -> share of its frames that waited an AIFS
    lag_p99_ms: float | None = None  # ns-3 behind real time
    load_range: list[float] = []  # the 1-minute load over the repetitions: lowest, highest
    conditions: Conditions  # the largest load, busy share and steal over the repetitions


class _Summary(_Strict):
    name: str  # the file's stem
    command: str  # reproduces it, from the repository's root
    measured_utc: str  # ISO 8601, when the run ended
    machine: str  # cores, virtualisation, OS
    versions: dict[str, str]
    settings: dict[str, str | int | float | bool | list[str] | list[float]]


class PerfOverheadSummary(_Summary):
    kind: Literal["perf-overhead"]
    rows: list[PerfOverheadRow]


class Wifi80211Summary(_Summary):
    kind: Literal["wifi80211-link"]
    rows: list[Wifi80211Row]


class ZenohBridgeSummary(_Summary):
    kind: Literal["zenoh-bridge"]
    rows: list[ZenohBridgeRow]


class TwinTrialsSummary(_Summary):
    kind: Literal["twin-trials"]
    rows: list[TwinTrialRow]


class ForwarderCostSummary(_Summary):
    kind: Literal["forwarder-cost"]
    rows: list[ForwarderCostRow]


class SecurityCostSummary(_Summary):
    kind: Literal["security-cost"]
    rows: list[SecurityCostRow]


class RobotTrafficSummary(_Summary):
    kind: Literal["robot-traffic"]
    rows: list[RobotTrafficRow]


class ForwardingSummary(_Summary):
    kind: Literal["forwarding"]
    rows: list[ForwardingRow]


class ChenSweepSummary(_Summary):
    kind: Literal["chen-sweep"]
    rows: list[ChenSweepRow]


class AnalysisSpeedSummary(_Summary):
    kind: Literal["analysis-speed"]
    rows: list[AnalysisSpeedRow]


class VpnCompareSummary(_Summary):
    kind: Literal["vpn-compare"]
    rows: list[VpnCompareRow]


class NewcomerSummary(_Summary):
    kind: Literal["newcomer"]
    rows: list[NewcomerRow]


class ReproductionSummary(_Summary):
    kind: Literal["reproduction"]
    rows: list[ReproductionRow]


class LabLatencyRow(_Strict):
    """``benchmarks/bench_lab_latency.py``: one path's raw one-way latency, one round or pooled."""

    path: Literal["lab", "twin", "ddsperf"]  # lab rehearsal (rclpy), twin DDS (C stamps), ddsperf RTT/2
    round: int | None  # None: pooled over the rounds
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    conditions: Conditions  # the round's, or the largest over the pooled rounds


class LabLatencySummary(_Summary):
    kind: Literal["lab-latency"]
    rows: list[LabLatencyRow]


class PredictCaseRow(_Strict):
    """``benchmarks/bench_predict.py``: one twin trial with a link fault, its drift measured and predicted."""

    case: str
    middleware: str
    network: str
    longest_silence_s: float
    predicted_drift_mm: float
    measured_drift_mm: float | None  # None: the analysis found no lap drift
    stops_predicted: int
    stops_counted: int  # the twin robot's command watchdog stops, from trial.yaml's warnings
    conditions: Conditions


class PredictSummary(_Summary):
    kind: Literal["predict"]
    rows: list[PredictCaseRow]


class RelayStepRow(_Strict):
    """``benchmarks/bench_relay_steps.py``: one Python step of perf's relay, timed cold and warm."""

    step: str
    cold_us: float  # median, called after 100 ms asleep (as at 10 Hz)
    warm_us: float  # median, called again at once
    conditions: Conditions  # the largest load, busy share and steal over the step's rounds


class RelayStepsSummary(_Summary):
    kind: Literal["relay-steps"]
    rows: list[RelayStepRow]


class WirelessFindingsSummary(_Summary):
    kind: Literal["wireless-findings"]
    rows: list[WirelessFindingsRow]


AnySummary = (
    PerfOverheadSummary
    | Wifi80211Summary
    | ZenohBridgeSummary
    | TwinTrialsSummary
    | ForwarderCostSummary
    | SecurityCostSummary
    | RobotTrafficSummary
    | AnalysisSpeedSummary
    | ForwardingSummary
    | ReproductionSummary
    | NewcomerSummary
    | ChenSweepSummary
    | VpnCompareSummary
    | LabLatencySummary
    | PredictSummary
    | RelayStepsSummary
    | WirelessFindingsSummary
)
_ADAPTER: TypeAdapter[AnySummary] = TypeAdapter(Annotated[AnySummary, Field(discriminator="kind")])


def read_reference(path: Path) -> AnySummary:
    try:
        return _ADAPTER.validate_json(path.read_bytes())
    except OSError as exc:
        raise ReferenceFormatError(f"{path}: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReferenceFormatError(f"{path}: {where}: {first['msg']}") from None


def write_reference(path: Path, summary: AnySummary) -> Path:
    """One line per row, so a re-run's diff shows which rows changed."""
    data = summary.model_dump(mode="json")
    rows = data.pop("rows")
    head = json.dumps(data, indent=1)[:-2]
    body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{head},\n "rows": [\n{body}\n ]\n}}\n')
    return path


def machine_text() -> str:
    """This machine in a few words: cores, OS, kernel."""
    import os
    import platform

    os_name = platform.system()
    release = Path("/etc/os-release")
    if release.is_file():
        fields = dict(line.split("=", 1) for line in release.read_text().splitlines() if "=" in line)
        os_name = fields.get("PRETTY_NAME", os_name).strip('"')
    return f"{os.cpu_count()} cores, {os_name}, kernel {platform.release()}"


def utc_now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


SummaryT = TypeVar("SummaryT", bound=_Summary)


def run_summary(
    summary_type: type[SummaryT],
    path: Path,
    script: str,
    argv: list[str] | None,
    settings: dict,
    rows: list,
    versions: dict[str, str] | None = None,
) -> SummaryT:
    """A benchmark run's summary: its command (``script`` with the run's arguments), now, this machine
    and the software versions (``versions``: those its data was measured with, when a benchmark reads
    records made before it; by default this process's)."""
    import sys

    from fieldtest.record.trial import software_versions

    given = sys.argv[1:] if argv is None else argv
    (kind,) = get_args(summary_type.model_fields["kind"].annotation)
    return summary_type.model_validate(
        {"kind": kind, "name": path.stem, "command": " ".join([script, *given]), "measured_utc": utc_now(),
         "machine": machine_text(), "versions": software_versions() if versions is None else versions,
         "settings": settings, "rows": rows}
    )  # fmt: skip
