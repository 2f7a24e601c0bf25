"""The ground truth as the loader holds it: the valid poses and every frame the recorder received
(their own module, so the capture-time mapping and the trial loader both read them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Poses:
    """Valid ground-truth poses, Z up, sorted by time; ``clock`` says which clock ``t_ns`` is on."""

    t_ns: np.ndarray
    xyz: np.ndarray  # (n, 3)
    quat_xyzw: np.ndarray  # (n, 4)
    topic: str
    bag: str
    clock: str  # "host" or "robot"
    dropped_invalid: int = 0  # NaN or zero-norm samples removed


@dataclass
class Frames:
    """Every mocap frame the recorder received (valid or not), host clock, in arrival order."""

    t_ns: np.ndarray
    frame_number: np.ndarray
    valid: np.ndarray  # bool
    capture_s: np.ndarray | None = None  # the frame's own timestamp (Motive's clock), 0 where unset
