"""The analysis pipeline, the one module that crosses the stages (docs/architecture.md).

``analyze_trial``: one trial directory in (loading), its metrics and the drift's causes computed,
metrics.json, report.md, CSV files and PNG plots out (rendering). ``compare_trials``: many trials,
each analyzed first where its metrics.json is not current, then the campaign's tables (campaign),
figure and page (rendering). ``record_split`` and ``add_base_record`` rewrite a trial's analysis
after the fact.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from fieldtest.analysis.campaign.compare import (
    COMPARE_CSV,
    COMPARE_JSON,
    COMPARE_MD,
    DRIFT_PNG,
    config_table,
    current_metrics,
    find_trials,
    trial_table,
    write_comparison,
)
from fieldtest.analysis.campaign.power import DEFAULT_DIFFERENCES_M
from fieldtest.analysis.causes.attribution import drift_causes
from fieldtest.analysis.causes.restsplit import REST_CSV, write_rest_curve
from fieldtest.analysis.causes.stackfaults import stack_metrics
from fieldtest.analysis.loading import DEFAULT_MAX_GAP_S
from fieldtest.analysis.loading.mocaptime import CAPTURE
from fieldtest.analysis.loading.trialdata import AnalysisError, BagStatus, TrialData, load_trial
from fieldtest.analysis.loading.trialrobot import BaseCalibration, robot_label
from fieldtest.analysis.metrics import ape as ape_mod
from fieldtest.analysis.metrics import relativeerror as relative_mod
from fieldtest.analysis.metrics.basereceived import base_check
from fieldtest.analysis.metrics.drift import drift_metrics
from fieldtest.analysis.metrics.latency import ClockModel, estimate_clock, latency_metrics
from fieldtest.analysis.metrics.mocapgaps import mocap_metrics
from fieldtest.analysis.metrics.motion import (
    Motion,
    Track,
    build_track,
    detect_motion,
    laps_commanded,
    motion_end_s,
)
from fieldtest.analysis.metrics.schema import (
    METRICS_FILE,
    METRICS_VERSION,
    Ape,
    BagState,
    BaseReceived,
    Drift,
    DriftCauses,
    Fault,
    Inputs,
    LapWindow,
    Latency,
    Metrics,
    MetricsError,
    Mocap,
    MocapSource,
    MotionStart,
    Outcome,
    PlanSummary,
    Progress,
    Relative,
    RestSplit,
    RobotTraffic,
    Stack,
    TrialInfo,
    as_json,
    metrics_from,
)
from fieldtest.analysis.metrics.series import DriftSeries, LatencySeries
from fieldtest.analysis.metrics.wiretraffic import wire_metrics
from fieldtest.analysis.rendering.campaignpage import write_campaign_page
from fieldtest.analysis.rendering.campaignplot import drift_plot
from fieldtest.analysis.rendering.figuredata import PlotData
from fieldtest.analysis.rendering.plotprocess import PlotWorker, PlotWorkerError
from fieldtest.analysis.rendering.report import write_report
from fieldtest.analysis.rendering.trajectoryfile import write_trajectory
from fieldtest.middleware.dds.settings import Settings as DdsSettings
from fieldtest.middleware.dds.settings import side_middleware
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.plan import SquarePlan
from fieldtest.record import ANALYSIS_DIR, MOCAP_POSE_TOPIC, BagError, TrialFormatError, TrialRequest
from fieldtest.record.basecommands import BASE_COMMANDS_FILE, BASE_DIR

REPORT_FILE = "report.md"
DRIFT_CSV, LATENCY_CSV = "drift_curve.csv", "latency.csv"


def analyze_trial(
    trial_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    pose_topic: str = MOCAP_POSE_TOPIC,
    pose_bag: str | Path | None = None,
    up_axis: str = "z",
    pose_time: str = "header",
    mocap_time: str = CAPTURE,
    max_gap_s: float = DEFAULT_MAX_GAP_S,
    plots: bool = True,
    report: bool = True,
    export_tum: bool = False,
    write: bool = True,
    plot_worker: PlotWorker | None = None,
    base_calibration: BaseCalibration | None = None,
) -> Metrics:
    """Analyze a trial; returns its metrics (also written to ``<out_dir>/metrics.json``).

    Raises TrialFormatError / AnalysisError (one line naming the file) when nothing can be analyzed;
    anything less is a result with ``partial: true`` and the reasons. ``plot_worker``: one the
    caller started earlier (and closes); by default the plots get a worker of their own.
    ``base_calibration``: the robot's wheel-diameter ratio and wheelbase factor (compare's
    base_calibration.json entry), to split the rest drift (fieldtest.analysis.causes.restsplit).
    """
    started = time.perf_counter()
    opts = Options(
        pose_topic,
        pose_bag,
        up_axis,
        pose_time,
        max_gap_s,
        plots,
        report,
        export_tum,
        write,
        mocap_time,
        base_calibration,
    )
    trial_dir = Path(trial_dir)
    out_dir = Path(out_dir) if out_dir is not None else trial_dir / ANALYSIS_DIR
    own = plot_worker is None and plots and write
    worker = PlotWorker.start() if own else (plot_worker if plots and write else None)
    try:
        return _analyze(trial_dir, out_dir, opts, worker, started)
    finally:
        if own and worker is not None:
            worker.close()


@dataclass(frozen=True)
class Options:
    pose_topic: str
    pose_bag: str | Path | None
    up_axis: str
    pose_time: str
    max_gap_s: float
    plots: bool
    report: bool
    export_tum: bool
    write: bool
    mocap_time: str = CAPTURE
    base_calibration: BaseCalibration | None = None


def _analyze(
    trial_dir: Path, out_dir: Path, opts: Options, worker: PlotWorker | None, started: float
) -> Metrics:
    max_gap_s = opts.max_gap_s
    data = load_trial(
        trial_dir,
        pose_topic=opts.pose_topic,
        pose_bag=opts.pose_bag,
        up_axis=opts.up_axis,
        pose_time=opts.pose_time,
        mocap_time=opts.mocap_time,
    )
    clock = estimate_clock(data)
    faults, fault_notes = normalize_faults(
        data.record.outcome.faults, data.stream_start_ns, data.plan.total_s
    )
    latency, latency_series = latency_metrics(data, clock, faults)

    poses = data.poses
    track = build_track(poses, data.stream_start_ns, clock) if poses is not None else None
    motion = detect_motion(track, data, clock, max_gap_s) if track is not None else Motion()
    if track is None:
        motion.laps_commanded = laps_commanded(data)
    drift, drift_series = (
        drift_metrics(track, motion, data.plan, max_gap_s)
        if track is not None
        else (Drift(available=False, reason="no ground truth"), None)
    )
    end_s = None
    if track is not None and motion.start_s is not None:
        end_s = motion_end_s(track, motion, data.plan)
    mocap = Mocap()
    holes: list[tuple[float, float, bool]] = []
    if track is not None and poses is not None:
        window = (motion.start_s, end_s) if end_s is not None and motion.start_s is not None else None
        mocap, holes = mocap_metrics(track, data.frames, data.stream_start_ns, max_gap_s, window)
        source = MocapSource(topic=poses.topic, bag=poses.bag, clock=poses.clock)
        mocap = mocap.model_copy(
            update={"source": source, "dropped_non_finite": poses.dropped_invalid, "time": data.mocap_time}
        )

    measured = Measured(drift=drift, latency=latency, mocap=mocap, faults=faults, fault_notes=fault_notes)
    causes, rest_curve = (
        drift_causes(
            data, clock, track, motion, drift, max_gap_s, _link_emulated(data), opts.base_calibration
        )
        if track is not None
        else (DriftCauses(available=False, reason="no ground truth"), None)
    )
    stack = stack_metrics(data, clock, causes, _link_emulated(data))
    metrics = _assemble(
        data, clock, motion, measured, causes, stack, base_check(data, clock), opts.up_axis, max_gap_s
    )
    plot_data = PlotData.of(
        _json(metrics),
        data.plan,
        track,
        motion,
        drift_series,
        latency_series,
        holes,
        [_json(f) for f in faults],
    )
    if opts.write:
        out_dir.mkdir(parents=True, exist_ok=True)
    if worker is not None:
        worker.submit(out_dir, plot_data)  # it draws while evo computes the APE here
    ape = (
        ape_mod.ape_metrics(track, motion, data.plan, end_s)
        if track is not None and end_s is not None
        else Ape(available=False, reason="no motion start")
    )
    if worker is not None:
        worker.send_ape(_json(ape))
    relative = _relative(track, motion, data.plan, end_s)
    analysis_s = round(time.perf_counter() - started, 4)
    metrics = metrics.model_copy(update={"ape": ape, "relative": relative, "analysis_s": analysis_s})
    if not opts.write:
        return metrics_from(_json(metrics), trial_dir)
    files = _write_series(out_dir, drift_series, latency_series) + write_trajectory(out_dir, plot_data)
    if rest_curve is not None:
        write_rest_curve(out_dir / REST_CSV, data.plan, *rest_curve)
        files.append(REST_CSV)
    if opts.export_tum and track is not None and end_s is not None:
        ref, est = ape_mod.export_tum(track, motion, data.plan, end_s, out_dir)
        ape = ape.model_copy(update={"tum_files": [ref.name, est.name]})
        if relative.available:
            tum_files = relative_mod.export_rpe_tum(track, motion, data.plan, end_s, out_dir)
            relative = relative.model_copy(update={"tum_files": tum_files})
    written: dict[str, Any] = {"ape": ape, "relative": relative, "files": files}
    if opts.plots:
        plots, plot_warnings = _plots(worker, out_dir, plot_data, _json(ape))
        written.update(plots=plots, warnings=metrics.warnings + plot_warnings)
    metrics = _write_metrics(out_dir / METRICS_FILE, metrics.model_copy(update=written))
    if opts.report:
        write_report(out_dir / REPORT_FILE, metrics)
    return metrics


@dataclass(frozen=True)
class Measured:
    """The sections the stages before the causes computed, typed, and the faults' notes."""

    drift: Drift
    latency: Latency
    mocap: Mocap
    faults: list[Fault]
    fault_notes: list[str]


def _link_emulated(data: TrialData) -> bool:
    return data.record.request.network != "loopback"  # on loopback every timing error is the stack's


def trial_variant(req: TrialRequest) -> str:
    """The settings, beyond middleware, security and network, that set a trial apart from the
    default set-up ("" for none): compare keeps such trials in rows of their own."""
    parts = []
    mqtt = req.transport.own_settings(MqttSettings)
    zenoh = req.transport.own_settings(ZenohSettings)
    if mqtt and not mqtt.nagle:
        parts.append("Nagle off")
    if req.network not in ("loopback", "lab") and req.topology != "seed":
        parts.append(f"topology {topology_label(req.topology)}")
    if req.robot_traffic != "none":
        parts.append(f"robot traffic {req.robot_traffic}")
    if zenoh and zenoh.express:
        parts.append("cmd_vel priority 1 express")
    dds = req.transport.own_settings(DdsSettings)
    if dds and side_middleware(req.transport, "robot") != req.transport.middleware:
        parts.append(f"robot on {dds.robot_vendor}")
    if req.transport.qos != "default":  # e.g. RELIABLE against BEST_EFFORT: rows of their own
        parts.append(f"qos {req.transport.qos}")
    return ", ".join(parts)


def topology_label(topology: str | Sequence[str]) -> str:
    """A named placement as it is, a list of nodes joined: ``host+robot``."""
    return topology if isinstance(topology, str) else "+".join(topology)


def _relative(track: Track | None, motion: Motion, plan: SquarePlan, end_s: float | None) -> Relative:
    """Relative error per side, lap and more laps (evo's RPE; fieldtest.analysis.metrics.relativeerror)."""
    if end_s is None or track is None:
        return Relative(available=False, reason="no motion start")
    return relative_mod.relative_metrics(track, motion, plan, end_s)


def _plots(
    worker: PlotWorker | None, out_dir: Path, plot_data: PlotData, ape: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(the plots written, a warning if the worker failed and they were drawn here)."""
    warnings: list[str] = []
    if worker is not None:
        try:
            return worker.result(), warnings
        except PlotWorkerError as exc:
            warnings.append(f"{exc}; plots drawn in the main process")
    from fieldtest.analysis.rendering.trialplots import write_plots  # matplotlib: only when drawn here

    return write_plots(out_dir, plot_data, ape=lambda: ape), warnings


def _assemble(
    data: TrialData,
    clock: ClockModel,
    motion: Motion,
    measured: Measured,
    causes: DriftCauses,
    stack: Stack,
    base: BaseReceived,
    up_axis: str,
    max_gap_s: float,
) -> Metrics:
    """Every section but the APE's and the relative error's (evo computes them while the plots are
    drawn; the APE stands as not computed yet) and what the analysis wrote."""
    req, outcome, plan = data.record.request, data.record.outcome, data.plan
    drift, latency = measured.drift, measured.latency
    partial_reasons = list(data.problems) + motion.problems
    if outcome.end_reason != "completed":
        detail = f": {outcome.end_detail}" if outcome.end_detail else ""
        partial_reasons.append(f"trial ended early ({outcome.end_reason}{detail})")
    if data.poses is not None and motion.start_s is None:
        partial_reasons.append("no motion start found in the ground truth")
    if data.poses is not None and motion.laps_completed < plan.laps:
        partial_reasons.append(f"{motion.laps_completed} of {plan.laps} planned laps completed")
    warnings = list(data.warnings) + motion.notes + measured.fault_notes
    excluded, grid = drift.excluded_points or 0, drift.grid_points or 0
    if drift.available and excluded > 0.1 * grid:
        warnings.append(
            f"{excluded} of {grid} drift grid points fall in mocap gaps "
            f"longer than {max_gap_s} s and are excluded"
        )
    if clock.method in ("none", "outcome", "robot-live") and latency.available:
        warnings.append(f"no usable clock probes: one-way latency corrected with the {clock.method} offset")
    start = motion.start_s
    zenoh = req.transport.own_settings(ZenohSettings)
    mqtt = req.transport.own_settings(MqttSettings)
    return Metrics(
        metrics_version=METRICS_VERSION,
        trial=TrialInfo(
            dir=str(data.trial_dir),
            trial_id=data.record.trial_id,
            name=req.name,
            middleware=req.transport.middleware,
            zenoh_path=zenoh.path if zenoh else "",
            mqtt_nagle=mqtt.nagle if mqtt else None,
            variant=trial_variant(req),
            topology=topology_label(req.topology),
            security=req.transport.security,
            qos=req.transport.qos,
            network=req.network,
            repetition=req.repetition,
            seed=req.seed,
            robot_model=req.robot_model,
            robot=robot_label(req),
            cmd_type=req.cmd_type,
            stream_start_ns=data.stream_start_ns,
            plan=PlanSummary(
                laps=plan.laps,
                lap_s=plan.lap_s,
                side_m=plan.side_m,
                linear_speed_mps=plan.linear_speed_mps,
                turn_rate_dps=plan.turn_rate_dps,
                command_rate_hz=plan.command_rate_hz,
                start_delay_s=plan.start_delay_s,
                turn_direction=plan.turn_direction,
            ),
        ),
        partial=bool(partial_reasons),
        partial_reasons=partial_reasons,
        warnings=warnings + base.warnings,
        outcome=Outcome(
            end_reason=outcome.end_reason,
            end_detail=outcome.end_detail,
            warnings=list(outcome.warnings),
            link=outcome.link,
            cpu=outcome.cpu,
            clock_offset_s=outcome.clock_offset_s,
            clock_round_trip_s=outcome.clock_round_trip_s,
            nodes=outcome.nodes,
            software=outcome.software,
        ),
        progress=Progress(
            laps_planned=plan.laps,
            laps_commanded=motion.laps_commanded,
            laps_observed=motion.laps_observed,
            laps_completed=motion.laps_completed,
            commands_planned=plan.n_ticks(),
            last_seq_sent=latency.last_seq_sent,
            last_seq_received=latency.last_seq_received,
            ended_early=outcome.end_reason != "completed",
        ),
        inputs=Inputs(
            bags={name: _bag_state(status) for name, status in data.bags.items()},
            up_axis=up_axis,
            max_bridged_gap_s=max_gap_s,
        ),
        motion=MotionStart(
            start_s=start,
            first_command_s=motion.first_command_s,
            first_received_s=motion.first_received_s,
            start_lag_s=_diff(start, motion.first_command_s),
            start_after_receipt_s=_diff(start, motion.first_received_s),
            noise_floor_m=motion.noise_floor_m,
            body_yaw_offset_deg=math.degrees(motion.body_yaw_offset),
            start_heading_deg=math.degrees(motion.start_heading),
            start_xy_m=None if motion.start_xy is None else [float(v) for v in motion.start_xy],
            laps=[LapWindow(lap=i + 1, start_s=a, end_s=b) for i, (a, b) in enumerate(motion.lap_windows)],
        ),
        drift=drift,
        ape=Ape(available=False, reason="not computed yet"),
        latency=latency,
        mocap=measured.mocap,
        faults=measured.faults,
        robot_traffic=RobotTraffic.model_validate(outcome.robot_traffic) if outcome.robot_traffic else None,
        wire=wire_metrics(outcome.link_traffic),
        drift_causes=causes,
        stack=stack,
        base=base,
    )


def _bag_state(status: BagStatus) -> BagState:
    return BagState(
        name=status.name,
        path=status.path,
        present=status.present,
        truncated=status.truncated,
        problem=status.problem,
        topics=status.topics,
    )


def _write_series(out_dir: Path, drift: DriftSeries | None, latency: LatencySeries) -> list[str]:
    """Per-point data behind the plots: the drift curves and the per-command latency, as CSV."""
    written = []
    if drift is not None and len(drift.tau_s):
        laps = drift.distance_m.shape[0] + 1
        header = "tau_s," + ",".join(f"lap{k}_vs_lap1_m" for k in range(2, laps + 1))
        rows = np.column_stack([drift.tau_s, drift.distance_m.T])
        np.savetxt(out_dir / DRIFT_CSV, rows, delimiter=",", header=header, comments="", fmt="%.9g")
        written.append(DRIFT_CSV)
    if len(latency.seq) or len(latency.lost_seq):
        seq = np.concatenate([latency.seq, latency.lost_seq])
        sent = np.concatenate([latency.sent_s, latency.lost_sent_s])
        one_way = np.concatenate([latency.one_way_ms, np.full(len(latency.lost_seq), np.nan)])
        live = np.concatenate([latency.live_ms, np.full(len(latency.lost_seq), np.nan)])
        order = np.argsort(seq, kind="stable")
        with (out_dir / LATENCY_CSV).open("w") as f:
            f.write("seq,sent_s,received,one_way_ms,live_one_way_ms\n")
            for i in order:
                received = int(i < len(latency.seq))
                f.write(f"{seq[i]},{sent[i]:.9f},{received},{_csv_num(one_way[i])},{_csv_num(live[i])}\n")
        written.append(LATENCY_CSV)
    return written


def _csv_num(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.6f}"


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else float(a - b)


def normalize_faults(
    raw: list[dict[str, Any]], stream_start_ns: int, stream_end_s: float
) -> tuple[list[Fault], list[str]]:
    """outcome.faults entries as {kind, start_s, duration_s, end_s, detail, ...} in stream seconds.

    Accepted time keys (docs/analysis.md, "Faults"): start_s (stream seconds) or start_ns (host clock,
    ns since the epoch); duration_s, duration_ns, end_s or end_ns; none of these four means the
    fault lasts to the end of the stream (a profile change that was never undone).
    """
    out: list[Fault] = []
    notes: list[str] = []
    for i, fault in enumerate(raw):
        start = _seconds(fault, "start", stream_start_ns)
        end = _seconds(fault, "end", stream_start_ns)
        duration = fault.get("duration_s")
        if duration is None and fault.get("duration_ns") is not None:
            duration = fault["duration_ns"] / 1e9
        if duration is None and start is not None and end is not None:
            duration = end - start
        open_ended = duration is None
        if start is None:
            notes.append(f"outcome.faults[{i}] has no start_s or start_ns; not shown")
            continue
        if duration is None:  # open-ended
            duration = max(0.0, stream_end_s - start)
        # the record's other keys stay as they are (a profile change's profile, ...)
        others = {k: v for k, v in fault.items() if k not in _FAULT_TIME_KEYS and k not in Fault.model_fields}
        entry = Fault(
            kind=str(fault.get("kind", "fault")),
            start_s=float(start),
            duration_s=float(duration),
            end_s=float(start + duration),
            detail=str(fault.get("detail", "")),
            open_ended=open_ended,
            **others,
        )
        out.append(entry)
    return out, notes


_FAULT_TIME_KEYS = {"start_ns", "end_ns", "duration_ns"}  # in stream seconds in metrics.json


def _seconds(fault: dict[str, Any], key: str, stream_start_ns: int) -> float | None:
    if fault.get(f"{key}_s") is not None:
        return float(fault[f"{key}_s"])
    if fault.get(f"{key}_ns") is not None:
        return (int(fault[f"{key}_ns"]) - stream_start_ns) / 1e9
    return None


def _write_metrics(path: Path, metrics: Metrics) -> Metrics:
    """Write metrics.json; returns what its readers will read from it (MetricsError if it does not
    fit the schema)."""
    return _write_json(path, _json(metrics))


def _write_json(path: Path, data: dict[str, Any]) -> Metrics:
    """Write a metrics.json's content, first checked against the schema (MetricsError if it does not fit)."""
    written = metrics_from(data, path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    tmp.replace(path)
    return written


def _json(section: BaseModel) -> dict[str, Any]:
    """A section (or the whole metrics) as metrics.json holds it."""
    data: dict[str, Any] = _jsonable(as_json(section))
    return data


def _jsonable(x: Any) -> Any:
    """numpy scalars to Python, NaN/inf to null (JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return [_jsonable(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def record_split(trial_dir: str | Path, section: RestSplit) -> bool:
    """Write the split into the trial's metrics.json (``drift_causes.base``) and report.md, as
    ``fieldtest analyze --base-calibration`` would; False if its analysis cannot be rewritten."""
    path = Path(trial_dir).resolve() / ANALYSIS_DIR / METRICS_FILE
    try:
        data = json.loads(path.read_text())
        data["drift_causes"]["base"] = _json(section)
        written = _write_json(path, data)
        if (path.parent / REPORT_FILE).exists():
            write_report(path.parent / REPORT_FILE, written)
    except (OSError, ValueError, KeyError, TypeError, MetricsError):
        return False
    return True


def add_base_record(trial_dir: Path, record: Path) -> bool:
    """Put a simulated base's record into a trial (``base/commands.csv``) and, if the trial was
    analyzed already, analyze it again so metrics.json and the report compare it. False if there is
    no record or no trial."""
    if not record.is_file() or not (trial_dir / "trial.yaml").is_file():
        return False
    target = trial_dir / BASE_DIR / BASE_COMMANDS_FILE
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(record, target)
    if (trial_dir / ANALYSIS_DIR / "metrics.json").is_file():
        analyze_trial(trial_dir)
    return True


def _analyze_one(job: tuple[Path, dict[str, Any]]) -> tuple[Path, Metrics | None, str]:
    """(trial, metrics or None, one-line problem); runs in a pool process or in line."""
    trial_dir, kwargs = job
    try:
        return trial_dir, analyze_trial(trial_dir, plots=False, **kwargs), ""
    except (TrialFormatError, AnalysisError, BagError, ValueError, OSError) as exc:
        return trial_dir, None, (f"{trial_dir}: {exc}" if str(trial_dir) not in str(exc) else str(exc))


def _analyze_all(
    dirs: list[Path], jobs: int | None, kwargs: dict[str, Any]
) -> list[tuple[Path, Metrics | None, str]]:
    """Analyze trials, in parallel processes when there are several and fork is available."""
    workers = min(jobs or os.cpu_count() or 1, len(dirs))
    work = [(d, kwargs) for d in dirs]
    if workers < 2 or len(dirs) < 4 or "fork" not in multiprocessing.get_all_start_methods():
        return [_analyze_one(job) for job in work]
    if threading.active_count() > 1:  # forking a threaded process is not safe
        return [_analyze_one(job) for job in work]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return pool.map(_analyze_one, work, chunksize=1)


def compare_trials(
    dirs: Iterable[str | Path],
    out_dir: str | Path,
    reanalyze: bool = False,
    jobs: int | None = None,
    page: bool = True,
    resolve_m: tuple[float, ...] = DEFAULT_DIFFERENCES_M,
    **analyze_kwargs: Any,
) -> dict:
    """Tabulate trials; returns {"rows": [...], "trials": [...], "skipped": [...], "files": [...]}.

    ``page``: also write the campaign page (campaign.html with its figures and tables).

    Trials without a current metrics.json (all with ``reanalyze``) are analyzed first, without
    plots, in up to ``jobs`` processes (default: one per core). ``resolve_m``: the differences of
    lap drift the power table gives repetitions for.
    """
    out_dir = Path(out_dir)
    found = find_trials(dirs)
    known = {d: (None if reanalyze else current_metrics(d)) for d in found}
    todo = [d for d in found if known[d] is None]
    problems: dict[Path, str] = {}
    for trial_dir, metrics, problem in _analyze_all(todo, jobs, analyze_kwargs):
        known[trial_dir], problems[trial_dir] = metrics, problem
    trials = [m for m in (known[d] for d in found) if m is not None]
    skipped = [problems[d] for d in found if known[d] is None]
    if not trials:
        raise AnalysisError("no trial could be analyzed: " + "; ".join(skipped))
    result, base = write_comparison(trials, found, skipped, out_dir, resolve_m)
    for split_dir, section in base.items():  # the trial's own metrics.json and report.md carry it too
        record_split(split_dir, section)
    drift_plot(out_dir / DRIFT_PNG, result["rows"])
    written = (
        write_campaign_page(
            out_dir, result["rows"], trials, config_table(result["rows"]), trial_table(result["trials"])
        )
        if page
        else []
    )
    result["files"] = [str(out_dir / f) for f in (COMPARE_MD, COMPARE_CSV, COMPARE_JSON, DRIFT_PNG, *written)]
    return result
