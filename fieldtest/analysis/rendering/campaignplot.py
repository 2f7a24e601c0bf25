"""drift_by_config.png: compare's bar plot of drift per configuration (median over repetitions,
min-max bars, every repetition a dot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


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
