"""Relative error (evo's RPE over all pairs one side, one lap, two and four laps of path apart) on
synthetic robots with a known systematic error, swept over mocap rate and sample phase.

- Every side driven k times as long: each pair's relative translation error is |k - 1| times the
  straight distance between its two reference poses, so over pairs one side apart the largest is
  |k - 1| x side (corner to corner) and none is below |k - 1| x 0.98 side / sqrt(2) (a pair around a
  corner); the rotation error is zero. Pairs whole laps apart start and end at (nearly) the same
  point of the closed square: at most |k - 1| x 2 % of their distance.
- Every turn 1 + e / 90 times as large (e deg too far): each pair's rotation error is that factor
  minus one times the reference's heading change between them; most pairs one side apart (both ends
  on sides) hold exactly one turn, so the median is |e|, a lap apart |4 e|, two laps |8 e|.
"""

import json
import math
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial, compare_trials
from fieldtest.analysis.metrics.relativeerror import REL_DELTA_TOL
from fieldtest.analysis.metrics.schema import read_metrics
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.plan import SquarePlan
from fieldtest.testkit import needs
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(laps=4, side_duration_s=1.5, turn_rate_dps=90.0)  # 1.5 s sides, 1 s turns
SIDE = PLAN.side_m
LAP = 4 * SIDE
SWEEP = [(100.0, 0.0), (120.0, 0.45), (119.88, 0.2), (360.0, 0.7)]  # (mocap Hz, phase of a period)
EVO_RPE = Path(sys.executable).parent / "evo_rpe"


def _relative(tmp_path, rate_hz=120.0, phase=0.0, plan=PLAN, **spec) -> dict:
    values = {
        "plan": plan,
        "mocap_rate_hz": rate_hz,
        "mocap_phase_s": phase / rate_hz,
        "world_yaw_deg": -50.0,
    }
    synthesize(tmp_path / "trial", SynthSpec(**(values | spec)))
    metrics = analyze_trial(tmp_path / "trial", plots=False, report=False)
    assert metrics.relative.available, metrics.relative
    return {d.name: d.model_dump() for d in metrics.relative.distances}


@pytest.mark.parametrize("rate_hz, phase", SWEEP)
def test_a_robot_on_the_ideal_path_has_no_relative_error(tmp_path, rate_hz, phase):
    at = _relative(tmp_path, rate_hz, phase)
    assert [at[n]["distance_m"] for n in ("side", "lap", "2 laps", "4 laps")] == pytest.approx(
        [SIDE, LAP, 2 * LAP, 4 * LAP], abs=1e-12
    )
    for d in at.values():
        assert d["available"] and d["pairs"] > 0, d
        assert d["translation_m"]["max"] < 1e-6 and d["rotation_deg"]["max"] < 1e-4, d


@pytest.mark.parametrize("scale", [1.02, 0.97])
@pytest.mark.parametrize("rate_hz, phase", SWEEP)
def test_sides_too_long_or_short(tmp_path, rate_hz, phase, scale):
    at = _relative(tmp_path, rate_hz, phase, side_scale=scale)
    error = abs(scale - 1)
    side = at["side"]
    assert side["translation_m"]["max"] == pytest.approx(error * SIDE, abs=1e-6)
    assert side["translation_m"]["min"] >= error * (1 - REL_DELTA_TOL) * SIDE / math.sqrt(2) - 1e-6
    assert side["translation_pct"]["max"] == pytest.approx(error * 100, abs=1e-4)
    assert side["rotation_deg"]["max"] < 1e-4
    for name in ("lap", "2 laps", "4 laps"):
        bound = error * REL_DELTA_TOL * at[name]["distance_m"]  # a pair 2 % short of whole laps
        assert at[name]["translation_m"]["max"] <= bound + 1e-6, name
        assert at[name]["rotation_deg"]["max"] < 1e-4


@pytest.mark.parametrize("turn_error_deg", [1.5, -2.0])
@pytest.mark.parametrize("rate_hz, phase", SWEEP)
def test_turns_too_far_or_short(tmp_path, rate_hz, phase, turn_error_deg):
    at = _relative(tmp_path, rate_hz, phase, turn_scale=1 + turn_error_deg / 90.0)
    e = abs(turn_error_deg)
    for name, turns, metres in (("side", 1, SIDE), ("lap", 4, LAP), ("2 laps", 8, 2 * LAP)):
        assert at[name]["rotation_deg"]["median"] == pytest.approx(turns * e, abs=1e-6), name
        assert at[name]["rotation_deg_per_m"]["median"] == pytest.approx(turns * e / metres, abs=1e-6), name


def test_distances_come_from_the_plan(tmp_path):
    """A plan with 0.8 m sides and three laps: the distances follow it; four laps are not driven."""
    plan = SquarePlan(laps=3, side_length_m=0.8, linear_speed_mps=0.4, turn_rate_dps=90.0)
    at = _relative(tmp_path, plan=plan, side_scale=1.01)
    assert at["side"]["distance_m"] == pytest.approx(0.8) and at["lap"]["distance_m"] == pytest.approx(3.2)
    assert at["side"]["translation_m"]["max"] == pytest.approx(0.01 * 0.8, abs=1e-6)
    assert at["4 laps"]["available"] is False and "shorter" in at["4 laps"]["reason"]


def test_relative_error_equals_evo_rpe_command_line(tmp_path):
    if not EVO_RPE.exists():
        pytest.fail(f"needs evo_rpe at {EVO_RPE}: {needs.INSTALL_HINT}", pytrace=False)
    spec = SynthSpec(plan=PLAN, side_scale=1.015, turn_scale=1.01, mocap_noise_m=0.0003, world_yaw_deg=120.0)
    synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False, export_tum=True)
    ref, est = (tmp_path / "t" / "analysis" / name for name in m.relative.tum_files)
    env = dict(os.environ, HOME=str(tmp_path / "home"), MPLBACKEND="Agg")
    (tmp_path / "home").mkdir()
    for d in m.relative.distances[:2]:  # side and lap
        for relation, key in (("trans_part", "translation_m"), ("angle_deg", "rotation_deg")):
            result = tmp_path / f"{d.name}-{relation}.zip"
            argv = [str(EVO_RPE), "tum", str(ref), str(est), "--pose_relation", relation]
            argv += ["--delta", repr(d.distance_m), "--delta_unit", "m", "--delta_tol", str(REL_DELTA_TOL)]
            argv += ["--all_pairs", "--pairs_from_reference", "--save_results", str(result), "--no_warnings"]
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
            with zipfile.ZipFile(result) as z:
                stats = json.loads(z.read("stats.json"))
            figures = getattr(d, key)
            assert figures["max"] > 1e-4  # a real error, not zero against zero
            for stat in ("rmse", "mean", "median", "std", "min", "max"):
                assert figures[stat] == pytest.approx(stats[stat], abs=1e-9), (d.name, key, stat)


def test_report_and_compare_carry_the_relative_error(tmp_path):
    for rep, scale in enumerate((1.01, 1.02, 1.04)):
        spec = SynthSpec(name=f"r{rep}", plan=PLAN, repetition=rep, side_scale=scale)
        synthesize(tmp_path / "runs" / spec.name, spec)
    result = compare_trials([tmp_path / "runs"], tmp_path / "out")
    row = result["rows"][0]["metrics"]
    side = [
        read_metrics(tmp_path / "runs" / f"r{i}" / "analysis" / "metrics.json").relative.at("side")
        for i in range(3)
    ]
    assert row["rpe_side"]["median"] == pytest.approx(side[1].translation_m["rmse"] * 1000, abs=1e-9)
    assert row["rel_side"]["max"] == pytest.approx(side[2].translation_pct["mean"], abs=1e-9)
    assert row["rpe_side"]["max"] > row["rpe_side"]["min"] > 0
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| RPE side (mm) | RPE lap (mm) | rel. error side (%) | rotation per m (deg/m) |" in md
    lines = report_lines(read_metrics(tmp_path / "runs" / "r2" / "analysis" / "metrics.json"))
    assert "## Relative error (RPE against the ideal square)" in lines
    row_line = next(line for line in lines if line.startswith(f"| side ({SIDE:.2f} m) |"))
    assert f"| {side[2].translation_m['max'] * 1000:.2f} mm |" in row_line


def test_the_figures_are_evo_rpe_class_figures_at_every_distance(tmp_path):
    """The pairs come from evo; the error poses and angles, computed for all pairs at once, equal what
    evo's RPE class computes pair by pair (translation and rotation angle), with mocap noise."""
    from evo.core import metrics

    from fieldtest.analysis.loading.trialdata import load_trial
    from fieldtest.analysis.metrics.ape import evo_trajectories
    from fieldtest.analysis.metrics.latency import estimate_clock
    from fieldtest.analysis.metrics.motion import build_track, detect_motion, motion_end_s
    from fieldtest.analysis.metrics.relativeerror import relative_metrics, rpe_inputs

    spec = SynthSpec(
        plan=PLAN, side_scale=0.99, turn_scale=1.02, mocap_noise_m=0.0005, body_yaw_offset_deg=3.0
    )
    synthesize(tmp_path / "t", spec)
    data = load_trial(tmp_path / "t")
    clock = estimate_clock(data)
    track = build_track(data.poses, data.stream_start_ns, clock)
    motion = detect_motion(track, data, clock, 0.1)
    end_s = motion_end_s(track, motion, PLAN)
    ours = relative_metrics(track, motion, PLAN, end_s).distances
    ref, est = evo_trajectories(*rpe_inputs(track, motion, PLAN, end_s))
    relations = (
        (metrics.PoseRelation.translation_part, "translation_m"),
        (metrics.PoseRelation.rotation_angle_deg, "rotation_deg"),
    )
    for d in ours:
        for relation, key in relations:
            rpe = metrics.RPE(relation, d.distance_m, metrics.Unit.meters, REL_DELTA_TOL, True, True)
            rpe.process_data((ref, est))
            assert len(rpe.error) == d.pairs
            figures = getattr(d, key)
            for stat, value in rpe.get_all_statistics().items():
                if stat in figures:
                    assert figures[stat] == pytest.approx(value, rel=1e-9, abs=1e-12), (d.name, key, stat)


def test_rotation_angle_equals_evo_near_0_and_180_deg():
    from evo.core import lie_algebra as lie
    from scipy.spatial.transform import Rotation

    from fieldtest.analysis.metrics.relativeerror import rotation_angles_deg

    rng = np.random.default_rng(7)
    near_half_turn = np.column_stack(
        [rng.normal(0, 1e-3, (300, 2)), np.pi - np.abs(rng.normal(0, 1e-3, 300))]
    )
    rotations = np.concatenate(
        [
            Rotation.random(1000, random_state=3).as_matrix(),
            Rotation.from_rotvec(rng.normal(0.0, 1e-7, (300, 3))).as_matrix(),
            Rotation.from_rotvec(near_half_turn).as_matrix(),
        ]
    )
    evo = np.array([abs(lie.so3_log_angle(r, degrees=True)) for r in rotations])
    assert np.max(np.abs(rotation_angles_deg(rotations) - evo)) < 1e-9
