"""Relative error against the ideal square, as evo's RPE computes it (docs/analysis.md, "Relative
error").

Reference and estimate are the APE's (the plan's ideal pose at each ground-truth time, and the ground
truth). For each distance of the plan's path (one side, one lap, two and four laps): evo's pairs for
an RPE with that delta in metres over all pairs whose *reference* path between them is that long
(within 2 %), each pair's error pose as evo's RPE forms it (for all pairs at once), its translation
and its rotation angle. Per metre as rpg_trajectory_evaluation gives relative error against
distance travelled: each pair's error divided by the nominal distance (translation in %, rotation
in deg/m). tests/test_analysis_relativeerror.py checks the figures against evo's RPE and evo_rpe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fieldtest.analysis.metrics.ape import TrajectoryArrays, ape_inputs, evo_trajectories, export_rows
from fieldtest.analysis.metrics.motion import Motion, Track
from fieldtest.analysis.metrics.schema import Relative, RelativeAt
from fieldtest.plan import SIDES_PER_LAP, SquarePlan

REL_DELTA_TOL = 0.02  # evo_rpe --delta_tol; its default 0.1 lets in pairs 90 % of a lap apart (see docs)
POSE_STEP_S = 0.1  # the poses paired: the first in each 0.1 s (evo's all-pairs search is O(n^2))
RPE_REF_NAME, RPE_EST_NAME = "rpe_reference.tum", "rpe_ground_truth.tum"


def plan_distances(plan: SquarePlan) -> list[tuple[str, float]]:
    """(name, metres of path): one side, one lap, two laps, four laps, from the plan."""
    lap_m = SIDES_PER_LAP * plan.side_m
    return [("side", plan.side_m), ("lap", lap_m), ("2 laps", 2 * lap_m), ("4 laps", 4 * lap_m)]


def rpe_inputs(track: Track, motion: Motion, plan: SquarePlan, end_s: float) -> TrajectoryArrays:
    """The APE's inputs thinned to the first pose in each ``POSE_STEP_S``."""
    t, est_xyz, est_q, ref_xyz, ref_q = ape_inputs(track, motion, plan, end_s)
    if len(t) == 0:
        return t, est_xyz, est_q, ref_xyz, ref_q
    keep = np.r_[True, np.diff(np.floor((t - t[0]) / POSE_STEP_S)) > 0]
    return t[keep], est_xyz[keep], est_q[keep], ref_xyz[keep], ref_q[keep]


def relative_metrics(track: Track, motion: Motion, plan: SquarePlan, end_s: float) -> Relative:
    from evo import __version__ as evo_version

    t, est_xyz, est_q, ref_xyz, ref_q = rpe_inputs(track, motion, plan, end_s)
    if len(t) < 2:
        return Relative(available=False, reason="fewer than two ground-truth poses in the motion window")
    ref, est = evo_trajectories(t, est_xyz, est_q, ref_xyz, ref_q)
    path_m = float(np.sum(np.linalg.norm(np.diff(ref.positions_xyz, axis=0), axis=1)))
    return Relative(
        available=True,
        tool=f"evo {evo_version}",
        relation="translation_part, rotation angle of the same error poses",
        pairs="all, by the reference's path length",
        rel_delta_tol=REL_DELTA_TOL,
        pose_step_s=POSE_STEP_S,
        poses=int(ref.num_poses),
        path_m=path_m,
        distances=[_at_distance(ref, est, name, d, path_m) for name, d in plan_distances(plan)],
    )


def _at_distance(ref: Any, est: Any, name: str, distance_m: float, path_m: float) -> RelativeAt:
    from evo.core.filters import FilterException
    from evo.core.metrics import Unit, id_pairs_from_delta

    if path_m < distance_m * (1 - REL_DELTA_TOL):
        reason = f"the path driven ({path_m:.2f} m) is shorter"
        return RelativeAt(name=name, distance_m=distance_m, available=False, reason=reason)
    try:  # what evo's RPE(delta_unit=meters, all_pairs=True, pairs_from_reference=True) pairs
        pairs = id_pairs_from_delta(ref.poses_se3, distance_m, Unit.meters, REL_DELTA_TOL, all_pairs=True)
    except FilterException as exc:
        return RelativeAt(name=name, distance_m=distance_m, available=False, reason=str(exc))
    error = error_poses(np.array(ref.poses_se3), np.array(est.poses_se3), np.array(pairs))
    translation = np.linalg.norm(error[:, :3, 3], axis=1)
    rotation_deg = rotation_angles_deg(error[:, :3, :3])
    return RelativeAt(
        name=name,
        distance_m=distance_m,
        available=True,
        pairs=len(translation),
        translation_m=_stats(translation),
        translation_pct=_stats(translation / distance_m * 100.0),
        rotation_deg=_stats(rotation_deg),
        rotation_deg_per_m=_stats(rotation_deg / distance_m),
    )


def _inverse(m: np.ndarray) -> np.ndarray:
    """Inverses of SE(3) matrices (n x 4 x 4)."""
    out = np.zeros_like(m)
    rt = np.transpose(m[:, :3, :3], (0, 2, 1))
    out[:, :3, :3] = rt
    out[:, :3, 3] = -np.einsum("nij,nj->ni", rt, m[:, :3, 3])
    out[:, 3, 3] = 1.0
    return out


def error_poses(ref: np.ndarray, est: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """E_ij = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j) for every pair (i, j): evo's ``RPE.rpe_base``, for all pairs
    at once (evo builds each pair's matrices one by one, about 0.1 ms a pair)."""
    i, j = pairs[:, 0], pairs[:, 1]
    ref_rel = _inverse(ref[i]) @ ref[j]
    est_rel = _inverse(est[i]) @ est[j]
    error: np.ndarray = _inverse(ref_rel) @ est_rel
    return error


def rotation_angles_deg(r: np.ndarray) -> np.ndarray:
    """Angle of each rotation matrix (n x 3 x 3) in degrees: what evo's ``so3_log_angle`` gives (the
    norm of the rotation vector), from sin and cos together so it stays exact near 0 and 180 deg;
    evo's goes through scipy one matrix at a time (about 1 ms each)."""
    cos = (np.trace(r, axis1=1, axis2=2) - 1.0) / 2.0
    skew = np.stack([r[:, 2, 1] - r[:, 1, 2], r[:, 0, 2] - r[:, 2, 0], r[:, 1, 0] - r[:, 0, 1]], axis=1)
    angles: np.ndarray = np.degrees(np.arctan2(np.linalg.norm(skew, axis=1) / 2.0, cos))
    return angles


def _stats(v: np.ndarray) -> dict[str, float]:
    """evo's statistics (rmse, mean, median, std, min, max)."""
    return {
        "rmse": float(np.sqrt(np.mean(v * v))),
        "mean": float(np.mean(v)),
        "median": float(np.median(v)),
        "std": float(np.std(v)),
        "min": float(np.min(v)),
        "max": float(np.max(v)),
    }


def export_rpe_tum(track: Track, motion: Motion, plan: SquarePlan, end_s: float, out_dir: Path) -> list[str]:
    """The thinned trajectories as TUM files, so ``evo_rpe tum rpe_reference.tum rpe_ground_truth.tum
    --delta D --delta_unit m --all_pairs --pairs_from_reference`` reproduces each distance's figures."""
    t, est_xyz, est_q, ref_xyz, ref_q = rpe_inputs(track, motion, plan, end_s)
    export_rows(out_dir / RPE_REF_NAME, t, ref_xyz, ref_q)
    export_rows(out_dir / RPE_EST_NAME, t, est_xyz, est_q)
    return [RPE_REF_NAME, RPE_EST_NAME]
