"""Compare many trials: one row per middleware x security x network, median and spread over repetitions.

Each trial's ``analysis/metrics.json`` is used when it is current (same metrics version); a trial
without one is analysed first (no plots). Outputs: compare.md, compare.csv, compare.json and
drift_by_config.png in the output directory.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fieldtest.catalog import report_order
from fieldtest.record import ANALYSIS_DIR, TRIAL_FILE, BagError, TrialFormatError

from .analyze import analyze_trial
from .basesplit import CALIBRATION_FILE, base_lines, campaign_split, record_split, requests_of
from .campaignpage import write_campaign_page
from .intervals import interval_lines, median_interval
from .loading import AnalysisError
from .metrics import METRICS_FILE, Metrics, MetricsError, metrics_from, read_metrics
from .power import DEFAULT_DIFFERENCES_M, drift_groups, power_lines, power_table
from .trialfigures import lateness_values, relative_values
from .umbmark import umbmark, umbmark_lines
from .wire import wire_values

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

    def mm(x):
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


def stall_values(causes) -> dict[str, float | None]:
    """The shifted-latency median drift (mm) and the segment changes held by a stall."""
    spread_ = causes.phase_spread if causes is not None else None
    changes = causes.segment_changes if causes is not None else None
    return {
        "drift_shifted": spread_["median_m"] * 1000.0 if spread_ else None,
        "stalled_changes": float(len(changes["stalled"])) if changes else None,
    }


def spread(values: list[float]) -> dict[str, float | int | None]:
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


def _sort_key(key: tuple[str, str, str]):
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
        return None  # another metrics version or damaged: analyse again


def _analyze_one(job: tuple[Path, dict]) -> tuple[Path, Metrics | None, str]:
    """(trial, metrics or None, one-line problem); runs in a pool process or in line."""
    trial_dir, kwargs = job
    try:
        metrics = analyze_trial(trial_dir, plots=False, **kwargs)
        return trial_dir, metrics_from(metrics, trial_dir / ANALYSIS_DIR / METRICS_FILE), ""
    except (TrialFormatError, AnalysisError, BagError, ValueError, OSError) as exc:
        return trial_dir, None, (f"{trial_dir}: {exc}" if str(trial_dir) not in str(exc) else str(exc))


def _analyze_all(dirs: list[Path], jobs: int | None, kwargs: dict):
    """Analyse trials, in parallel processes when there are several and fork is available."""
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
    **analyze_kwargs,
) -> dict:
    """Tabulate trials; returns {"rows": [...], "trials": [...], "skipped": [...], "files": [...]}.

    ``page``: also write the campaign page (campaign.html with its figures and tables).

    Trials without a current metrics.json (all with ``reanalyze``) are analysed first, without
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
    trials = [known[d] for d in found if known[d] is not None]
    skipped = [problems[d] for d in found if known[d] is None]
    if not trials:
        raise AnalysisError("no trial could be analysed: " + "; ".join(skipped))
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
                "umbmark": umbmark(members),
            }
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    per_trial = [_trial_row(m) for m in trials]
    calibrations, base = campaign_split(trials, requests_of(found))
    for t in per_trial:
        t["base"] = base.get(t["dir"])
    for trial_dir, section in base.items():  # the trial's own metrics.json and report.md carry it too
        record_split(trial_dir, section)
    power = power_table(drift_groups(trials), resolve_m)
    result = {"rows": rows, "trials": per_trial, "skipped": skipped}
    result.update({"base_calibration": calibrations, "power": power})
    if calibrations:
        (out_dir / CALIBRATION_FILE).write_text(json.dumps(calibrations, indent=1))
    (out_dir / COMPARE_JSON).write_text(json.dumps(result, indent=1))
    _write_csv(out_dir / COMPARE_CSV, rows)
    extra = base_lines(calibrations, per_trial) + power_lines(power)
    (out_dir / COMPARE_MD).write_text("\n".join(_markdown(rows, per_trial, skipped, extra)) + "\n")
    drift_plot(out_dir / DRIFT_PNG, rows)
    written = (
        write_campaign_page(out_dir, rows, trials, config_table(rows), trial_table(per_trial)) if page else []
    )
    result["files"] = [str(out_dir / f) for f in (COMPARE_MD, COMPARE_CSV, COMPARE_JSON, DRIFT_PNG, *written)]
    return result


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


def _markdown(rows: list[dict], trials: list[dict], skipped: list[str], extra: list[str] = ()) -> list[str]:
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


def drift_plot(path: Path, rows: list[dict]) -> None:
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 1.1 * len(rows) + 2.0), 5.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.1, right=0.98, top=0.88, bottom=0.22)
    cmap = colormaps["tab10"]
    middlewares = list(dict.fromkeys(r["middleware"] for r in rows))
    labelled = set()
    for i, row in enumerate(rows):
        s = row["metrics"]["drift_mean"]
        color = cmap(middlewares.index(row["middleware"]) % 10)
        label = row["middleware"] if row["middleware"] not in labelled else None
        labelled.add(row["middleware"])
        hatch = "//" if row["security"] != "none" else None
        if s["n"]:
            err = [[s["median"] - s["min"]], [s["max"] - s["median"]]]
            ax.bar(i, s["median"], color=color, alpha=0.8, hatch=hatch, edgecolor="k", lw=0.5, label=label)
            ax.errorbar(i, s["median"], yerr=err, color="k", capsize=4, lw=1)
            points = [v for v in row["drift_values"] if v is not None]
            ax.plot(
                np.full(len(points), i) + np.linspace(-0.15, 0.15, len(points)), points, "o", color="k", ms=3
            )
        else:
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['middleware']}\n{r['security']}\n{r['network']}" for r in rows], fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("configuration: middleware / security / network")
    ax.set_ylabel("drift, last lap vs lap 1, mean (mm)")
    ax.set_title(
        "Drift per configuration: median over repetitions, bars min-max, dots = repetitions\n(hatched = security on)",
        fontsize=10,
    )
    ax.grid(True, axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no bars when no trial completed its laps
        ax.legend(fontsize=8, title="middleware", title_fontsize=8)
    fig.savefig(path, dpi=110)
