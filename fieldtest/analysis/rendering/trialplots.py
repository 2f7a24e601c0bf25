"""PNG plots of one trial: trajectory with laps and the ideal square, drift over lap time, latency.

Drawn with matplotlib's object API on the Agg canvas (no pyplot state, no display needed), from a
PlotData: importing this module loads numpy and matplotlib, nothing else of the analysis.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fieldtest.analysis.rendering.figuredata import PlotData

DPI = 110
FAULT_COLOR = "#d62728"
TRAJECTORY_PNG, DRIFT_PNG, LATENCY_PNG = "trajectory.png", "drift.png", "latency.png"


def _title(metrics: dict, what: str) -> str:
    trial = metrics["trial"]
    config = f"{trial['middleware']} / security {trial['security']} / network {trial['network']}"
    partial = "  [PARTIAL]" if metrics.get("partial") else ""
    return f"{trial['name']} (rep {trial['repetition']}): {what}{partial}\n{config}"


def _draw(fig: Figure) -> FigureCanvasAgg:
    """Draw on an Agg canvas at DPI: the pixels ``fig.savefig(path, dpi=DPI)`` would write."""
    canvas = FigureCanvasAgg(fig)
    fig.set_dpi(DPI)
    canvas.draw()
    return canvas


def _write(canvas: FigureCanvasAgg, path: Path) -> str:
    write_png(path, np.asarray(canvas.buffer_rgba()), DPI)
    return path.name


def _save(fig: Figure, path: Path) -> str:
    return _write(_draw(fig), path)


def write_png(path: Path, rgba: np.ndarray, dpi: float) -> None:
    """An (h, w, 4) uint8 image as an 8-bit PNG: RGB when it is opaque, no row filters, zlib level 1.

    Half the time of Pillow's writer (which matplotlib's savefig uses) on these plots, at about the
    same size: Pillow tries four filters on every row of the RGBA image; a plot's flat colours
    compress as well unfiltered, and an opaque figure needs no alpha channel.
    """
    height, width, _ = rgba.shape
    opaque = bool(rgba[:, :, 3].min() == 255)
    pixels = rgba[:, :, :3] if opaque else rgba
    rows = np.zeros((height, 1 + width * pixels.shape[2]), np.uint8)  # column 0: filter type 0 (none)
    rows[:, 1:].reshape(pixels.shape)[...] = pixels
    per_metre = round(dpi / 0.0254)
    header = struct.pack(">IIBBBBB", width, height, 8, 2 if opaque else 6, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        for kind, data in (
            (b"IHDR", header),
            (b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
            (b"tEXt", b"Software\0fieldtest (matplotlib " + matplotlib.__version__.encode() + b")"),
            (b"IDAT", zlib.compress(rows.data, 1)),
            (b"IEND", b""),
        ):
            f.write(struct.pack(">I", len(data)) + kind + data)
            f.write(struct.pack(">I", zlib.crc32(kind + data)))


def write_plots(
    out_dir: Path,
    data: PlotData,
    ape: Callable[[], dict] | None = None,
    latency: Callable[[], str] | None = None,
) -> list[str]:
    """Draw and save the plots; ``ape()`` gives the APE section for the trajectory's legend.
    ``latency()``, if given, stands for the latency plot (drawn elsewhere meanwhile) and is asked for
    at the end.

    The APE is asked for last: the plot worker gets it from the analysis, which computes it while
    the worker draws. The trajectory is drawn without its legend before that, and the legend on top
    of it once the APE is known (the legend covers only the trajectory's lines and grid, which are
    drawn before it in a full draw as well)."""
    latency_png = write_latency_plot(out_dir, data) if latency is None else ""
    written = []
    if data.drift is not None and len(data.drift.tau_s):
        written.append(_save(drift_figure(data), out_dir / DRIFT_PNG))
    if data.xy is not None:
        fig = trajectory_figure(data)
        canvas = _draw(fig)
        ape_section = ape() if ape is not None else data.metrics.get("ape", {})
        ax = fig.axes[0]
        if ape_section.get("available"):
            ax.plot(
                [], [], " ", label=f"APE vs ideal (evo, origin aligned): RMSE {_mm(ape_section['rmse_m'])}"
            )
        ax.draw_artist(ax.legend(loc="center", fontsize=8, framealpha=0.85))
        written.insert(0, _write(canvas, out_dir / TRAJECTORY_PNG))
    written.append(latency() if latency is not None else latency_png)
    return written


def write_latency_plot(out_dir: Path, data: PlotData) -> str:
    return _save(latency_figure(data), out_dir / LATENCY_PNG)


def _lap_colors(n: int) -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def trajectory_figure(data: PlotData) -> Figure:
    """The figure without its legend: write_plots adds the APE line and the legend."""
    metrics, faults, holes = data.metrics, data.faults, data.holes
    fig = Figure(figsize=(8.0, 7.6))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.08, top=0.91)
    ax = fig.add_subplot()
    local, t = data.xy, data.t_s
    if local is None or t is None:
        raise ValueError("no ground truth located in the start frame to draw")
    laps = [(t >= lo) & (t <= hi) for lo, hi in data.lap_windows]
    outside = _outside_laps(local, laps)
    ax.plot(outside[:, 0], outside[:, 1], color="0.75", lw=0.8, label="before / after the laps, partial lap")
    corners = data.ideal_corners  # lap 1: start of each side and back to the start
    ax.plot(corners[:, 0], corners[:, 1], "k--", lw=1.2, label=f"ideal square ({data.side_m:.2f} m sides)")
    colors = _lap_colors(max(1, len(laps)))
    for i, inside in enumerate(laps):
        ax.plot(local[inside, 0], local[inside, 1], color=colors[i], lw=1.3, label=f"lap {i + 1}")
    for k, fault in enumerate(faults):
        inside = (t >= fault["start_s"]) & (t <= fault["end_s"])
        if np.any(inside):
            label = "during a link fault" if k == 0 else None
            ax.plot(local[inside, 0], local[inside, 1], color=FAULT_COLOR, lw=6, alpha=0.35, label=label)
    excluded = [(a, b) for a, b, bridged in holes if not bridged]
    if excluded:
        ends = np.array([a for a, _ in excluded] + [b for _, b in excluded])
        idx = np.clip(np.searchsorted(t, ends), 0, len(t) - 1)
        ax.plot(local[idx, 0], local[idx, 1], "x", color="k", ms=7, label="edge of a mocap gap (excluded)")
    ax.plot([0], [0], marker=">", color="green", ms=11, ls="none", label="start (x = driving direction)")
    drift = metrics["drift"]
    if drift.get("available"):
        ax.plot(
            [],
            [],
            " ",
            label=f"drift lap {drift['last_lap']} vs 1: mean {_mm(drift['mean_m'])}, end {_mm(drift['at_lap_end_m'])}",
        )
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (m), start frame: forward at the start")
    ax.set_ylabel("y (m), start frame: left at the start")
    ax.grid(True, alpha=0.3)
    ax.set_title(_title(metrics, "trajectory (ground truth)"), fontsize=10)
    return fig


def _outside_laps(xy: np.ndarray, laps: list[np.ndarray]) -> np.ndarray:
    """``xy`` with the points inside the completed laps blanked (NaN, which breaks the line): the grey
    line would lie under the laps' wider lines there, and drawing it costs as much as drawing them.
    The laps' first and last points stay, so the grey line still meets them."""
    if not laps or not len(xy):
        return xy
    covered = np.logical_or.reduce(laps)
    interior = covered.copy()
    interior[1:-1] &= covered[:-2] & covered[2:]
    interior[[0, -1]] = False
    return np.where(interior[:, None], np.nan, xy)


def _mm(value_m: float | None) -> str:
    return "n/a" if value_m is None else f"{value_m * 1000:.1f} mm"


def drift_figure(data: PlotData) -> Figure:
    metrics, drift, faults = data.metrics, data.drift, data.faults
    fig = Figure(figsize=(9.0, 5.0))
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.11, top=0.87)
    ax = fig.add_subplot()
    if drift is None or data.motion_start_s is None:
        raise ValueError("no drift series to draw")
    tau = drift.tau_s
    n_laps = drift.distance_m.shape[0] + 1
    colors = _lap_colors(n_laps)
    pair = data.side_s + data.turn_s
    for i in range(4):
        lo = i * pair + data.side_s
        ax.axvspan(lo, lo + data.turn_s, color="0.92", zorder=0, label="in-place turn" if i == 0 else None)
    for k in range(drift.distance_m.shape[0]):
        last = k == drift.distance_m.shape[0] - 1
        d_mm = drift.distance_m[k] * 1000
        label = f"lap {k + 2} vs lap 1"
        if last:
            m = metrics["drift"]
            label += f" (mean {_mm(m['mean_m'])}, RMS {_mm(m['rms_m'])}, max {_mm(m['max_m'])})"
        ax.plot(
            tau, d_mm, color=colors[k + 1], lw=2.0 if last else 0.9, alpha=1.0 if last else 0.6, label=label
        )
    first_fault = True
    for fault in faults:
        for lap in (0, n_laps - 1):
            lo = fault["start_s"] - (data.motion_start_s + lap * data.lap_s)
            hi = lo + fault["duration_s"]
            if hi > 0 and lo < data.lap_s:
                fault_label = "link fault (lap 1 or last lap)" if first_fault else None
                ax.axvspan(max(lo, 0), min(hi, data.lap_s), color=FAULT_COLOR, alpha=0.2, label=fault_label)
                first_fault = False
    ax.set_xlim(0, data.lap_s)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time into the lap (s), from the lap's start")
    ax.set_ylabel("distance from lap 1 at the same time (mm)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(_title(metrics, "drift between laps"), fontsize=10)
    return fig


def latency_figure(data: PlotData) -> Figure:
    metrics, series, faults = data.metrics, data.latency, data.faults
    fig = Figure(figsize=(10.0, 8.0))
    lat = metrics["latency"]
    if not lat.get("available") or len(series.one_way_ms) == 0:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no command receipts from the robot: no latency", ha="center", va="center")
        ax.set_axis_off()
        fig.suptitle(_title(metrics, "link latency"), fontsize=10)
        return fig
    grid = fig.add_gridspec(
        2, 2, height_ratios=[1.1, 1], left=0.07, right=0.98, bottom=0.07, top=0.9, hspace=0.45, wspace=0.2
    )
    ax_t = fig.add_subplot(grid[0, :])
    ax_h = fig.add_subplot(grid[1, 0])
    ax_c = fig.add_subplot(grid[1, 1])
    one_way = series.one_way_ms
    ax_t.plot(series.sent_s, one_way, ".", ms=2.5, color="C0", label="one-way, offline clock correction")
    live_differs = (
        np.nanmax(np.abs(series.live_ms - one_way), initial=0.0) > 0.05
        if np.any(np.isfinite(series.live_ms))
        else False
    )
    if live_differs:  # drawn only when the robot's live correction differs from the offline one
        ax_t.plot(
            series.sent_s,
            series.live_ms,
            ".",
            ms=1.5,
            color="C1",
            alpha=0.5,
            label="one-way, robot's live clock estimate",
        )
    if len(series.lost_sent_s):
        rug = np.full(len(series.lost_sent_s), 0.03)  # in axes height, so it sits on the x axis
        ax_t.plot(
            series.lost_sent_s,
            rug,
            "|",
            color="k",
            ms=12,
            transform=ax_t.get_xaxis_transform(),
            label=f"lost command ({lat['lost']})",
        )
    for k, fault in enumerate(faults):
        ax_t.axvspan(
            fault["start_s"],
            fault["end_s"],
            color=FAULT_COLOR,
            alpha=0.2,
            label=f"{fault['kind']}" if k == 0 else None,
        )
    for i, (lo, _) in enumerate(data.lap_windows):
        ax_t.axvline(lo, color="0.6", lw=0.8, ls=":", label="lap start" if i == 0 else None)
    ax_t.set_xlabel("send time (s from stream start)", labelpad=1)
    ax_t.set_ylabel("latency (ms)")
    ax_t.grid(True, alpha=0.3)
    top = np.nanmax(one_way, initial=1.0)
    ax_t.set_ylim(min(0.0, np.nanmin(one_way, initial=0.0)), top * 1.08 + 0.1)
    ax_t.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=5, frameon=False)
    finite = np.sort(one_way[np.isfinite(one_way)])
    lo, hi = (finite[0], finite[-1]) if len(finite) else (0.0, 1.0)
    if hi - lo < 1.0:  # a near-constant latency: show 1 ms around it
        lo, hi = 0.5 * (lo + hi) - 0.5, 0.5 * (lo + hi) + 0.5
    bins = np.linspace(lo, hi, min(80, max(10, len(finite) // 20)) + 1)
    ax_h.hist(finite, bins=bins.tolist(), color="C0", histtype="stepfilled")
    ax_h.set_xlabel("one-way latency (ms)")
    ax_h.set_ylabel("commands")
    ax_h.grid(True, alpha=0.3)
    cdf = np.arange(1, len(finite) + 1) / len(finite)
    ax_c.plot(finite, cdf, color="C0")
    stats = lat["one_way_ms"]
    for name, style in (("median", "--"), ("p90", "-."), ("p99", ":")):
        if stats.get(name) is not None:
            ax_c.axvline(stats[name], color="0.3", ls=style, lw=1, label=f"{name} {stats[name]:.2f} ms")
    for ax in (ax_h, ax_c):
        ax.set_xlim(lo - 0.02 * (hi - lo), hi + 0.02 * (hi - lo))
        ax.ticklabel_format(axis="x", useOffset=False)
    ax_c.set_xlabel("one-way latency (ms)")
    ax_c.set_ylabel("fraction of received commands")
    ax_c.set_ylim(0, 1.01)
    ax_c.grid(True, alpha=0.3)
    ax_c.legend(fontsize=8, loc="lower right")
    loss = lat.get("loss_ratio")
    summary = f"received {lat['commands_received']} of {lat['commands_sent']}" + (
        f", loss {loss * 100:.2f} %" if loss is not None else ""
    )
    fig.suptitle(_title(metrics, f"link latency ({summary})"), fontsize=10)
    return fig
