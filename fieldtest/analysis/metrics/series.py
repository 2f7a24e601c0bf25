"""The per-point series behind a trial's plots and CSV files: the drift curves and the per-command
latency. Plain numpy dataclasses: the plot worker unpickles them without importing the analysis
(fieldtest.analysis.rendering.figuredata)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class DriftSeries:
    """Phase grid and the distance of every later lap from lap 1 (laps x grid), for the plots."""

    tau_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    distance_m: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # row k: lap k+2 vs lap 1
    corners_first: np.ndarray | None = None  # start frame, (4, 2)
    corners_last: np.ndarray | None = None


@dataclass
class LatencySeries:
    """Per-command series for the plots (stream seconds, milliseconds)."""

    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sent_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    one_way_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    live_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lost_seq: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lost_sent_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
