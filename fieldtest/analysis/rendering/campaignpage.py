"""One page per campaign: a self-contained HTML file (figures embedded as SVG data URIs, no scripts,
no external files) beside the figures as SVG and PDF and the tables as CSV and LaTeX.

Written by ``compare`` into its output directory (docs/analysis.md, "One page per campaign"):
``campaign.html``, ``figures/*.svg|pdf``, ``tables/{configurations,trials}.{csv,tex}``. Figures:
trajectory overlays per configuration, drift with its median interval, drift by cause, one-way
latency distributions, and the command timing classes. Each trial row links that trial's report.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fieldtest.analysis.campaign.umbmark import UMBMARK_NOTE, umbmark_table
from fieldtest.analysis.metrics.schema import Metrics
from fieldtest.analysis.rendering.trajectoryfile import read_trajectory
from fieldtest.record import ANALYSIS_DIR

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

CAMPAIGN_HTML, FIGURES_DIR, TABLES_DIR = "campaign.html", "figures", "tables"
CLASS_COLORS = {"on_time": "#2ca02c", "late": "#ffbf00", "too_late": "#d62728", "lost": "#555555"}


def config_label(row: dict) -> str:
    return f"{row['middleware']} / {row['security']} / {row['network']}"


def _members(rows: list[dict], trials: list[Metrics]) -> list[list[Metrics]]:
    """The trials of each row, in the rows' order."""
    return [[m for m in trials if m.config == (r["middleware"], r["security"], r["network"])] for r in rows]


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def trajectories_figure(rows: list[dict], groups: list[list[Metrics]]) -> Figure:
    """Each configuration's repetitions in the start frame over the ideal square (invalid: dashed)."""
    n = max(1, len(rows))
    cols = min(3, n)
    fig = _figure(4.0 * cols, 3.8 * ((n + cols - 1) // cols))
    for i, (row, members) in enumerate(zip(rows, groups, strict=True)):
        ax = fig.add_subplot((n + cols - 1) // cols, cols, i + 1)
        plan = members[0].trial.plan if members else None
        side = plan.side_m if plan is not None else 0.0
        turn = -1.0 if plan is not None and plan.turn_direction != "left" else 1.0
        ax.plot([0, side, side, 0, 0], [0, 0, turn * side, turn * side, 0], color="0.6", lw=2, label="ideal")
        for k, m in enumerate(members):
            rows_xy = read_trajectory(Path(m.trial.dir) / ANALYSIS_DIR)
            if rows_xy is None:
                continue
            style = "-" if m.valid else "--"
            ax.plot(
                rows_xy[:, 1],
                rows_xy[:, 2],
                style,
                lw=0.8,
                color=f"C{k % 10}",
                label=f"rep {m.trial.repetition}",
            )
        ax.set_title(config_label(row), fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("x, forward at start (m)", fontsize=8)
        ax.set_ylabel("y (m)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    fig.suptitle("Ground truth per configuration, start frame (dashed: invalid trial)", fontsize=10)
    fig.tight_layout()
    return fig


def _config_axis(ax: Axes, rows: list[dict]) -> None:
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([config_label(r).replace(" / ", "\n") for r in rows], fontsize=7)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.grid(True, axis="y", alpha=0.3)


def drift_figure(rows: list[dict]) -> Figure:
    """Median lap drift per configuration, its distribution-free interval, and each repetition."""
    fig = _figure(max(6.0, 1.2 * len(rows) + 2.0), 4.2)
    ax = fig.add_subplot()
    for i, row in enumerate(rows):
        values = [v for v in row["drift_values"] if v is not None]
        if values:
            ax.plot(
                np.full(len(values), i) + np.linspace(-0.12, 0.12, len(values)), values, "o", color="k", ms=3
            )
        med, iv = row["metrics"]["drift_mean"]["median"], row["drift_interval"]
        if med is not None and iv["low"] is not None:
            err = [[med - iv["low"]], [iv["high"] - med]]
            ax.errorbar(i, med, yerr=err, fmt="s", color="C0", capsize=6, ms=7, lw=2)
            ax.annotate(f"{100 * iv['coverage']:.0f} %", (i + 0.18, med), fontsize=7, color="C0")
        elif med is not None:
            ax.plot(i, med, "s", color="C0", ms=7)
    _config_axis(ax, rows)
    ax.set_ylabel("lap drift, mean (mm)")
    ax.set_title(
        "Drift per configuration: median (square), interval for the median with its coverage, repetitions (dots)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


CAUSES = (("host_emission_m", "host emission"), ("link_m", "link"), ("rest_m", "rest (robot, model, mocap)"))


def causes_figure(rows: list[dict], groups: list[list[Metrics]]) -> Figure:
    """Median of each part of the drift split into causes, per configuration (valid trials)."""
    fig = _figure(max(6.0, 1.2 * len(rows) + 2.0), 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(CAUSES)
    for c, (key, label) in enumerate(CAUSES):
        medians = []
        for members in groups:
            values = [
                getattr(m.drift_causes, key)
                for m in members
                if m.valid and m.drift_causes is not None and getattr(m.drift_causes, key) is not None
            ]
            medians.append(float(np.median(values)) * 1000 if values else np.nan)
        ax.bar(np.arange(len(rows)) + (c - 1) * width, medians, width, label=label, color=f"C{c + 1}")
    _config_axis(ax, rows)
    ax.set_ylabel("median over repetitions (mm)")
    ax.set_title(
        "Drift by cause (replays of the Create 3 model: plan -> send -> arrival -> motion)", fontsize=9
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def read_latencies_ms(analysis_dir: Path) -> np.ndarray:
    """One-way latencies (ms) of the commands that arrived, from the trial's latency.csv."""
    path = analysis_dir / "latency.csv"
    if not path.is_file():
        return np.zeros(0)
    with path.open() as f:
        values = [
            float(r["one_way_ms"]) for r in csv.DictReader(f) if r["received"] == "1" and r["one_way_ms"]
        ]
    return np.array(values)


def latency_figure(rows: list[dict], groups: list[list[Metrics]]) -> Figure:
    """Distribution (empirical CDF) of one-way latency per configuration, valid trials pooled."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    fig = _figure(7.5, 4.2)
    ax = fig.add_subplot()
    for i, (row, members) in enumerate(zip(rows, groups, strict=True)):
        pooled = [read_latencies_ms(Path(m.trial.dir) / ANALYSIS_DIR) for m in members if m.valid]
        values = np.sort(np.concatenate(pooled)) if pooled else np.zeros(0)
        values = values[values > 0]
        if len(values):
            ax.step(
                values,
                np.arange(1, len(values) + 1) / len(values),
                where="post",
                color=f"C{i % 10}",
                label=config_label(row),
            )
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # 1, 2, 5, 10, 20, 50 ms
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("one-way latency (ms, log scale)")
    ax.set_ylabel("share of commands received")
    ax.set_title("One-way latency distribution per configuration (valid trials pooled)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def pooled_classes(members: list[Metrics]) -> dict[str, float] | None:
    """Shares of all commands sent by the valid trials in each timing class (None without any)."""
    classes = [m.latency.lateness for m in members if m.valid and m.latency.lateness is not None]
    total = sum(c.commands for c in classes)
    if not total:
        return None
    return {name: sum(getattr(c, name) for c in classes) / total for name in CLASS_COLORS}


def lateness_figure(rows: list[dict], groups: list[list[Metrics]]) -> Figure:
    """Commands on time, late, too late and lost per configuration, as shares (stacked)."""
    fig = _figure(7.5, max(2.5, 0.5 * len(rows) + 1.5))
    ax = fig.add_subplot()
    for i, members in enumerate(groups):
        shares = pooled_classes(members)
        left = 0.0
        for name, color in CLASS_COLORS.items():
            share = 0.0 if shares is None else shares[name] * 100
            ax.barh(i, share, left=left, color=color, label=name.replace("_", " ") if i == 0 else None)
            left += share
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([config_label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of commands sent (%)")
    ax.set_title(
        "Command timing classes (ros2-performance: late > min(0.2 T, 5 ms), too late > min(T, 50 ms))",
        fontsize=9,
        pad=22,  # room for the legend between the title and the bars
    )
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    return fig


FIGURES: tuple[tuple[str, str, Callable], ...] = (
    (
        "trajectories",
        "Trajectory overlays per configuration",
        lambda rows, groups: trajectories_figure(rows, groups),
    ),
    ("drift", "Lap drift with intervals", lambda rows, groups: drift_figure(rows)),
    ("drift_causes", "Drift by cause", causes_figure),
    ("latency", "One-way latency distributions", latency_figure),
    ("lateness", "Command timing classes", lateness_figure),
)


def _svg(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def latex_escape(text: str) -> str:
    table = {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
    }
    return "".join(table.get(ch, ch) for ch in text)


def latex_table(head: list[str], body: list[list[str]], caption: str) -> str:
    """A booktabs table (needs \\usepackage{booktabs})."""
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{" + "l" * 3 + "r" * (len(head) - 3) + "}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in head) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in body]
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{latex_escape(caption)}}}", r"\end{table}", ""]
    return "\n".join(lines)


def _write_table(tables: Path, name: str, head: list[str], body: list[list[str]], caption: str) -> list[str]:
    with (tables / f"{name}.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(head)
        writer.writerows(body)
    (tables / f"{name}.tex").write_text(latex_table(head, body, caption))
    return [f"{TABLES_DIR}/{name}.csv", f"{TABLES_DIR}/{name}.tex"]


def write_campaign_page(
    out_dir: Path,
    rows: list[dict],
    trials: list[Metrics],
    config_table: tuple[list[str], list[list[str]]],
    trial_table: tuple[list[str], list[list[str]], list[str]],
) -> list[str]:
    """Figures (SVG, PDF), tables (CSV, LaTeX) and campaign.html in ``out_dir``; returns the paths
    written, relative to it. ``config_table``: (head, rows of cells) as compare.md shows them;
    ``trial_table`` also the trials' directories in the order of its rows."""
    figures_dir, tables_dir = out_dir / FIGURES_DIR, out_dir / TABLES_DIR
    figures_dir.mkdir(parents=True, exist_ok=True)
    tables_dir.mkdir(parents=True, exist_ok=True)
    groups = _members(rows, trials)
    written, embedded = [], []
    for name, title, draw in FIGURES:
        fig = draw(rows, groups)
        svg = _svg(fig)
        (figures_dir / f"{name}.svg").write_bytes(svg)
        fig.savefig(figures_dir / f"{name}.pdf", format="pdf")
        written += [f"{FIGURES_DIR}/{name}.svg", f"{FIGURES_DIR}/{name}.pdf"]
        embedded.append((name, title, base64.b64encode(svg).decode("ascii")))
    written += _write_table(
        tables_dir, "configurations", *config_table, "Median (min-max) over the repetitions per configuration"
    )
    trial_head, trial_body, trial_dirs = trial_table
    written += _write_table(tables_dir, "trials", trial_head, trial_body, "Every trial of the campaign")
    links = [_report_link(out_dir, Path(d)) for d in trial_dirs]
    page = _html(rows, embedded, config_table, (trial_head, trial_body), links)
    (out_dir / CAMPAIGN_HTML).write_text(page)
    return [CAMPAIGN_HTML, *written]


def _report_link(out_dir: Path, trial_dir: Path) -> str:
    """The trial's report relative to the page ("" when it has none)."""
    report = trial_dir / ANALYSIS_DIR / "report.md"
    return os.path.relpath(report, out_dir) if report.is_file() else ""


def _umbmark_html(rows: list[dict]) -> str:
    head, body = umbmark_table(rows)
    if not body:
        return ""
    cells = "".join(f"<tr>{_cells(r)}</tr>" for r in body)
    return (
        f"<h2>Both directions (UMBmark)</h2><p>{html.escape(UMBMARK_NOTE)}</p>"
        f"<table><tr>{_cells(head, 'th')}</tr>{cells}</table>"
    )


def _cells(row: list[str], tag: str = "td") -> str:
    return "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in row)


def _html(
    rows: list[dict],
    embedded: list[tuple[str, str, str]],
    config_table: tuple[list[str], list[list[str]]],
    trial_table: tuple[list[str], list[list[str]]],
    links: list[str],
) -> str:
    trial_head, trial_body = trial_table
    trial_rows = []
    for cells, link in zip(trial_body, links, strict=True):
        first = (
            f'<a href="{html.escape(link)}">{html.escape(cells[0])}</a>' if link else html.escape(cells[0])
        )
        trial_rows.append(f"<tr><td>{first}</td>{_cells(cells[1:])}</tr>")
    figures = "\n".join(
        f'<figure id="{name}"><img src="data:image/svg+xml;base64,{data}" alt="{html.escape(title)}">'
        f'<figcaption>{html.escape(title)} (also <a href="{FIGURES_DIR}/{name}.svg">SVG</a>, '
        f'<a href="{FIGURES_DIR}/{name}.pdf">PDF</a>)</figcaption></figure>'
        for name, title, data in embedded
    )
    config_head, config_body = config_table
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Campaign: {len(rows)} configurations</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.8em; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
figure {{ margin: 1em 0 2em 0; }} img {{ max-width: 100%; }}
</style></head><body>
<h1>Campaign: {sum(r["trials"] for r in rows)} trials in {len(rows)} configurations</h1>
<p>Median (min-max) over the repetitions; drift, heading, closing error, APE and relative error only from
trials that completed every planned lap; invalid trials (the machine's own timing faults) are counted but
left out of every figure. Definitions: docs/analysis.md. Tables also as
<a href="{TABLES_DIR}/configurations.csv">CSV</a> and <a href="{TABLES_DIR}/configurations.tex">LaTeX</a>.</p>
<table><tr>{_cells(config_head, "th")}</tr>
{"".join(f"<tr>{_cells(r)}</tr>" for r in config_body)}
</table>
{_umbmark_html(rows)}
{figures}
<h2>Trials</h2>
<p>Each name links the trial's report. Also as <a href="{TABLES_DIR}/trials.csv">CSV</a> and
<a href="{TABLES_DIR}/trials.tex">LaTeX</a>.</p>
<table><tr>{_cells(trial_head, "th")}</tr>
{"".join(trial_rows)}
</table>
</body></html>
"""
