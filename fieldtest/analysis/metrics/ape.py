"""Absolute pose error against the ideal square, computed by evo (docs/analysis.md, "Error against
the ideal square"): reference = the plan's ideal pose at each ground-truth time, shifted to the
detected motion start; estimate = the ground truth; evo's associate_trajectories, align_origin and
APE(translation_part). ``export_tum`` writes the same two trajectories so ``evo_ape tum ref est
--align_origin`` reproduces the figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fieldtest.analysis.metrics.motion import Motion, Track, corrected_quaternions
from fieldtest.analysis.metrics.schema import Ape
from fieldtest.plan import SquarePlan

REF_NAME, EST_NAME = "ape_reference.tum", "ape_ground_truth.tum"
# timestamps (s), estimate xyz and quaternions (x, y, z, w), reference xyz and quaternions
TrajectoryArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def ape_inputs(track: Track, motion: Motion, plan: SquarePlan, end_s: float) -> TrajectoryArrays:
    """(timestamps s, est xyz, est quaternions xyzw, ref xyz, ref quaternions xyzw) over [start, end]."""
    inside = (track.t_s >= motion.start_s) & (track.t_s <= end_s)
    t = track.t_s[inside]
    est_q = corrected_quaternions(track, motion.body_yaw_offset)[inside]
    ideal = plan.ideal_pose(t - motion.start_s + plan.start_delay_s)
    ref_xyz = np.column_stack([ideal[:, 0], ideal[:, 1], np.zeros(len(t))])
    half = ideal[:, 2] / 2.0
    ref_q = np.column_stack([np.zeros(len(t)), np.zeros(len(t)), np.sin(half), np.cos(half)])
    return t, track.xyz[inside], est_q, ref_xyz, ref_q


def _se3(xyz: np.ndarray, q_xyzw: np.ndarray) -> list[np.ndarray]:
    """4x4 poses from positions and unit quaternions, vectorized (evo builds them one by one)."""
    x, y, z, w = q_xyzw.T
    n = len(xyz)
    m = np.zeros((n, 4, 4))
    m[:, 0, 0] = 1 - 2 * (y * y + z * z)
    m[:, 0, 1] = 2 * (x * y - z * w)
    m[:, 0, 2] = 2 * (x * z + y * w)
    m[:, 1, 0] = 2 * (x * y + z * w)
    m[:, 1, 1] = 1 - 2 * (x * x + z * z)
    m[:, 1, 2] = 2 * (y * z - x * w)
    m[:, 2, 0] = 2 * (x * z - y * w)
    m[:, 2, 1] = 2 * (y * z + x * w)
    m[:, 2, 2] = 1 - 2 * (x * x + y * y)
    m[:, :3, 3] = xyz
    m[:, 3, 3] = 1.0
    return list(m)


def _wxyz(q_xyzw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(q_xyzw[:, [3, 0, 1, 2]])


def _xyzw(q_wxyz: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(q_wxyz[:, [1, 2, 3, 0]])


def evo_trajectories(
    t: np.ndarray, est_xyz: np.ndarray, est_q: np.ndarray, ref_xyz: np.ndarray, ref_q: np.ndarray
) -> tuple[Any, Any]:
    """(reference, estimate) as evo trajectories, associated by timestamp (quaternions x, y, z, w)."""
    from evo.core import sync
    from evo.core.trajectory import PoseTrajectory3D

    ref = PoseTrajectory3D(ref_xyz, _wxyz(ref_q), timestamps=t.copy())
    est = PoseTrajectory3D(est_xyz, _wxyz(est_q), timestamps=t.copy())
    ref, est = sync.associate_trajectories(ref, est)
    # evo builds SE(3) matrices one pose at a time; hand it the same matrices built in one go
    ref = PoseTrajectory3D(
        poses_se3=_se3(ref.positions_xyz, _xyzw(ref.orientations_quat_wxyz)), timestamps=ref.timestamps
    )
    est = PoseTrajectory3D(
        poses_se3=_se3(est.positions_xyz, _xyzw(est.orientations_quat_wxyz)), timestamps=est.timestamps
    )
    return ref, est


def ape_metrics(track: Track, motion: Motion, plan: SquarePlan, end_s: float) -> Ape:
    from evo import __version__ as evo_version
    from evo.core import metrics

    t, est_xyz, est_q, ref_xyz, ref_q = ape_inputs(track, motion, plan, end_s)
    if len(t) < 2:
        return Ape(available=False, reason="fewer than two ground-truth poses in the motion window")
    ref, est = evo_trajectories(t, est_xyz, est_q, ref_xyz, ref_q)
    est.align_origin(ref)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    stats = {k: float(v) for k, v in ape.get_all_statistics().items()}
    return Ape(
        available=True,
        tool=f"evo {evo_version}",
        relation="translation_part",
        alignment="origin",
        poses=int(est.num_poses),
        window_s=[float(motion.found_start_s()), float(end_s)],
        rmse_m=stats["rmse"],
        mean_m=stats["mean"],
        median_m=stats["median"],
        std_m=stats["std"],
        min_m=stats["min"],
        max_m=stats["max"],
        sse_m2=stats["sse"],
    )


def export_tum(
    track: Track, motion: Motion, plan: SquarePlan, end_s: float, out_dir: Path
) -> tuple[Path, Path]:
    """TUM files (stream seconds, full float precision) of the reference and the estimate."""
    t, est_xyz, est_q, ref_xyz, ref_q = ape_inputs(track, motion, plan, end_s)
    paths = out_dir / REF_NAME, out_dir / EST_NAME
    export_rows(paths[0], t, ref_xyz, ref_q)
    export_rows(paths[1], t, est_xyz, est_q)
    return paths


def export_rows(path: Path, t: np.ndarray, xyz: np.ndarray, q_xyzw: np.ndarray) -> None:
    """One TUM file: stream seconds, position, quaternion x y z w (17 significant digits)."""
    rows = np.column_stack([t, xyz, q_xyzw])
    np.savetxt(path, rows, fmt="%.17g", header="timestamp tx ty tz qx qy qz qw")
