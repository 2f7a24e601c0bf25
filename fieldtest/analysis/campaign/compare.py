"""Compare many trials: one row per middleware x security x network, median and spread over repetitions.

The rows and tables of ``fieldtest compare`` (fieldtest.analysis.pipeline.compare_trials, which
analyzes the trials first): compare.md, compare.csv and compare.json in the output directory.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fieldtest.analysis.campaign.intervals import interval_lines, median_interval
from fieldtest.analysis.campaign.power import drift_groups, power_lines, power_table
from fieldtest.analysis.campaign.robotcalibration import base_lines, campaign_split
from fieldtest.analysis.campaign.trialvalues import lateness_values, relative_values
from fieldtest.analysis.campaign.umbmark import umbmark, umbmark_lines
from fieldtest.analysis.loading.trialdata import AnalysisError
from fieldtest.analysis.loading.trialrobot import CALIBRATION_FILE, requests_of
from fieldtest.analysis.metrics.schema import (
    METRICS_FILE,
    DriftCauses,
    Metrics,
    MetricsError,
    RestSplit,
    as_json,
    read_metrics,
)
from fieldtest.analysis.metrics.wiretraffic import wire_values
from fieldtest.catalog import report_order
from fieldtest.record import ANALYSIS_DIR, TRIAL_FILE

COMPARE_MD, COMPARE_CSV, COMPARE_JSON, DRIFT_PNG = (
    "compare.md",
    "compare.csv",
    "compare.json",
    "drift_by_config.png",
)


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    unit: str
    motion: bool  # needs complete laps (left out for partial trials)


COLUMNS = (
    Column("drift_mean", "drift mean", "mm", True),
    # what the trial's link gives wherever its stalls fall, and how many turn or side starts they
    # held (drift_causes.phase_spread, segment_changes: docs/analysis.md, "Stalls at segment changes")
    Column("drift_shifted", "drift, latencies shifted", "mm", True),
    Column("stalled_changes", "changes held by a stall", "count", True),
    Column("drift_lap_end", "drift at lap end", "mm", True),
    Column("heading_change", "heading change", "deg", True),
    Column("closing_error", "closing error", "mm", True),
    Column("ape_rmse", "APE RMSE", "mm", True),
    Column("rpe_side", "RPE side", "mm", True),
    Column("rpe_lap", "RPE lap", "mm", True),
    Column("rel_side", "rel. error side", "%", True),
    Column("rot_per_m", "rotation per m", "deg/m", True),
    Column("latency_median", "latency median", "ms", False),
    Column("latency_p99", "latency p99", "ms", False),
    Column("loss", "loss", "%", False),
    Column("jitter", "jitter", "ms", False),
    Column("late", "late", "%", False),
    Column("too_late", "too late", "%", False),
    Column("wire_h2r_kBps", "link host->robot", "kB/s", False),
    Column("wire_r2h_kBps", "link robot->host", "kB/s", False),
    Column("overhead_h2r", "overhead pkts host->robot", "%", False),
    Column("overhead_r2h", "overhead pkts robot->host", "%", False),
    Column("reliability_h2r", "HB/ACKNACK per data pkt", "ratio", False),
)


def find_trials(dirs: Iterable[str | Path]) -> list[Path]:
    """Trial directories given directly or found below the given directories (sorted, unique)."""
    found: list[Path] = []
    for d in map(Path, dirs):
        if (d / TRIAL_FILE).is_file():
            found.append(d)
        elif d.is_dir():
            found += _trials_below(d)
        else:
            raise AnalysisError(f"{d}: no such directory")
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise AnalysisError(f"no trial directories (with {TRIAL_FILE}) in {', '.join(map(str, dirs))}")
    return unique


def _trials_below(root: Path) -> list[Path]:
    """Directories holding a trial file below ``root``, following symbolic links (each real
    directory once, so a link back up does not loop)."""
    found, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        if TRIAL_FILE in filenames:
            found.append(Path(dirpath))
        dirnames.sort()
    return sorted(found)


def trial_values(m: Metrics) -> dict[str, float | None]:
    """The compared figures of one trial's metrics (None where not available)."""
    d, lat = m.drift, m.latency
    one_way = lat.one_way_ms

    def mm(x: float | None) -> float | None:
        return None if x is None else x * 1000.0

    values = {
        "drift_mean": mm(d.mean_m),
        "drift_lap_end": mm(d.at_lap_end_m),
        "heading_change": d.heading_change_deg,
        "closing_error": mm(d.closing.distance_m if d.closing else None),
        "ape_rmse": mm(m.ape.rmse_m),
        "latency_median": one_way.median if one_way else None,
        "latency_p99": one_way.p99 if one_way else None,
        "loss": None if lat.loss_ratio is None else lat.loss_ratio * 100.0,
        "jitter": lat.jitter_ms,
        **lateness_values(lat.lateness),
        **relative_values(m.relative),
        **wire_values(m.wire),
        **stall_values(m.drift_causes),
    }
    if not m.progress.complete:  # drift between lap 1 and an earlier last lap is not comparable
        values.update({c.key: None for c in COLUMNS if c.motion})
    return values


def stall_values(causes: DriftCauses | None) -> dict[str, float | None]:
    """The shifted-latency median drift (mm) and the segment changes held by a stall."""
    spread_ = causes.phase_spread if causes is not None else None
    changes = causes.segment_changes if causes is not None else None
    return {
        "drift_shifted": spread_.median_m * 1000.0 if spread_ is not None else None,
        "stalled_changes": float(len(changes.stalled)) if changes is not None else None,
    }


def spread(values: list[float | None]) -> dict[str, float | int | None]:
    v = np.array([x for x in values if x is not None], dtype=float)
    if len(v) == 0:
        return {"n": 0, "median": None, "p25": None, "p75": None, "min": None, "max": None}
    p25, med, p75 = np.percentile(v, [25, 50, 75])
    return {
        "n": int(len(v)),
        "median": float(med),
        "p25": float(p25),
        "p75": float(p75),
        "min": float(v.min()),
        "max": float(v.max()),
    }


def _sort_key(key: tuple[str, str, str]) -> tuple[str, int, str, bool, str]:
    middleware, security, network = key
    base = middleware.split(" (")[0]  # a variant sorts after its middleware's default set-up
    return network, report_order(base), middleware, security != "none", security


def current_metrics(trial_dir: Path) -> Metrics | None:
    """The trial's metrics.json if it is there, of a readable version and fits the schema."""
    path = trial_dir / ANALYSIS_DIR / METRICS_FILE
    if not path.is_file():
        return None
    try:
        return read_metrics(path)
    except MetricsError:
        return None  # another metrics version or damaged: analyze again


def write_comparison(
    trials: list[Metrics], found: list[Path], skipped: list[str], out_dir: Path, resolve_m: tuple[float, ...]
) -> tuple[dict, dict[str, RestSplit]]:
    """compare.md, compare.csv, compare.json (and base_calibration.json) in ``out_dir`` for the
    analyzed ``trials`` of the ``found`` trial directories; returns (the result compare_trials
    returns, without its files; each split trial's ``drift_causes.base`` section by its directory)."""
    groups: dict[tuple[str, str, str], list[Metrics]] = {}
    for m in trials:
        groups.setdefault(m.config, []).append(m)
    rows = []
    for key in sorted(groups, key=_sort_key):
        members = groups[key]
        values = [trial_values(m) for m in members if m.valid]  # invalid ones: counted, not averaged
        rows.append(
            {
                "middleware": key[0],
                "security": key[1],
                "network": key[2],
                "trials": len(members),
                "partial": sum(1 for m in members if m.partial),
                "invalid": sum(1 for m in members if not m.valid),
                "metrics": {c.key: spread([v[c.key] for v in values]) for c in COLUMNS},
                "drift_values": [v["drift_mean"] for v in values],
                "drift_interval": median_interval([v["drift_mean"] for v in values]),
                "umbmark": u.model_dump(mode="json") if (u := umbmark(members)) is not None else None,
            }
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    per_trial = [_trial_row(m) for m in trials]
    calibrations, base = campaign_split(trials, requests_of(found))
    for t in per_trial:
        t["base"] = as_json(split) if (split := base.get(t["dir"])) is not None else None
    power = power_table(drift_groups(trials), resolve_m)
    result = {"rows": rows, "trials": per_trial, "skipped": skipped}
    calibrations_json = {robot: c.as_json() for robot, c in calibrations.items()}
    result.update({"base_calibration": calibrations_json, "power": power})
    if calibrations:
        (out_dir / CALIBRATION_FILE).write_text(json.dumps(calibrations_json, indent=1))
    (out_dir / COMPARE_JSON).write_text(json.dumps(result, indent=1))
    _write_csv(out_dir / COMPARE_CSV, rows)
    extra = base_lines(calibrations, per_trial) + power_lines(power)
    (out_dir / COMPARE_MD).write_text("\n".join(_markdown(rows, per_trial, skipped, extra)) + "\n")
    return result, base


def _trial_row(m: Metrics) -> dict:
    t = m.trial
    return {
        "dir": t.dir,
        "name": t.name,
        "middleware": m.config[0],
        "security": t.security,
        "network": t.network,
        "repetition": t.repetition,
        "partial": m.partial,
        "valid": m.valid,
        "invalid_reasons": m.stack.invalid_reasons if m.stack else [],
        "laps_completed": m.progress.laps_completed,
        "rest": m.drift_causes.rest_m if m.drift_causes is not None else None,
        "latency_clock": m.latency.clock.method
        if m.latency.clock
        else None,  # shared-clock: the twin's truth
        **trial_values(m),
    }


def _write_csv(path: Path, rows: list[dict]) -> None:
    fields = ["middleware", "security", "network", "trials", "partial"]
    for c in COLUMNS:
        fields += [
            f"{c.key}_{c.unit.replace('%', 'percent').replace('/', '_per_')}_{s}"
            for s in ("n", "median", "p25", "p75", "min", "max")
        ]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for row in rows:
            cells = [row["middleware"], row["security"], row["network"], row["trials"], row["partial"]]
            for c in COLUMNS:
                s = row["metrics"][c.key]
                cells += [s["n"]] + [
                    "" if s[k] is None else f"{s[k]:.6g}" for k in ("median", "p25", "p75", "min", "max")
                ]
            writer.writerow(cells)


def _cell(s: dict, digits: int) -> str:
    if not s["n"]:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def _digits(unit: str) -> int:
    return {"mm": 1, "deg": 2, "ms": 2, "%": 2, "deg/m": 3, "count": 0}.get(unit, 2)


def config_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(head, cells per configuration) as compare.md shows them: median (min-max)."""
    head = ["middleware", "security", "network", "trials"] + [f"{c.title} ({c.unit})" for c in COLUMNS]
    body = []
    for row in rows:
        trials_cell = str(row["trials"]) + (f" ({row['partial']} partial)" if row["partial"] else "")
        trials_cell += f" ({row['invalid']} invalid)" if row.get("invalid") else ""
        cells = [row["middleware"], row["security"], row["network"], trials_cell]
        body.append(cells + [_cell(row["metrics"][c.key], _digits(c.unit)) for c in COLUMNS])
    return head, body


def trial_table(trials: list[dict]) -> tuple[list[str], list[list[str]], list[str]]:
    """(head, cells per trial, the trials' directories in that order) as compare.md shows them."""
    head = ["trial", "middleware", "security", "network", "rep", "laps"] + [
        f"{c.title} ({c.unit})" for c in COLUMNS
    ]
    ordered = sorted(
        trials,
        key=lambda t: (_sort_key((t["middleware"], t["security"], t["network"])), t["repetition"], t["name"]),
    )
    body = []
    for t in ordered:
        cells = [
            t["name"]
            + (" (partial)" if t["partial"] else "")
            + ("" if t.get("valid", True) else " (invalid)"),
            t["middleware"],
            t["security"],
            t["network"],
            str(t["repetition"]),
            str(t["laps_completed"]),
        ]
        body.append(
            cells + ["n/a" if t[c.key] is None else f"{t[c.key]:.{_digits(c.unit)}f}" for c in COLUMNS]
        )
    return head, body, [t["dir"] for t in ordered]


def _markdown(
    rows: list[dict], trials: list[dict], skipped: list[str], extra: Sequence[str] = ()
) -> list[str]:
    head, body = config_table(rows)
    lines = [
        "# Comparison of trials",
        "",
        "One row per middleware x security x network: median over the repetitions, (min-max) when there are "
        "several. Drift, heading change, closing error, APE and relative error only from trials that completed "
        "every planned lap (the trials column counts partial ones in brackets). Invalid trials (the machine's own "
        "timing faults beyond the bounds) are counted but left out of every figure. Latency of twin trials is arrival "
        "minus send time on the clock all their processes share; of lab trials, the NTP-style estimate. "
        "Definitions: docs/analysis.md.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + " --- |" * len(head),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    lines += ["", f"![drift per configuration]({DRIFT_PNG})", ""] + interval_lines(rows) + umbmark_lines(rows)
    lines += [*extra, "## Trials", ""]
    head, body, _ = trial_table(trials)
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    if skipped:
        lines += ["", "## Skipped", ""] + [f"- {s}" for s in skipped]
    return lines
