"""Motion start and lap-end figures swept over what a lab varies: mocap rate (100-360 Hz), the phase of
the samples against the robot's step changes of speed, and position noise (0-0.5 mm).

The robot follows the plan's ideal path (instantaneous speed changes), so the true start, lap-end
drift and heading change are known exactly."""

import math

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.drift import drift_metrics
from fieldtest.analysis.metrics.motion import Motion, Track, _calibrate_heading, _find_start
from fieldtest.analysis.metrics.schema import Drift
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize, true_pose

SHORT = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
RATES_HZ = (100.0, 119.88, 120.0, 240.0, 360.0)  # 119.88: sample phase differs from lap to lap
PHASES = (0.0, 0.2, 0.45, 0.7, 0.95)  # of a sample period, first sample against the robot's start
SHIFT = (0.021, -0.013)
ROTATION_DEG = 1.5
MAX_GAP_S = 0.1


def _spec(**overrides) -> SynthSpec:
    values = {
        "plan": SHORT,
        "motion_lag_s": 0.05,
        "last_lap_shift_m": SHIFT,
        "last_lap_rotation_deg": ROTATION_DEG,
        "world_yaw_deg": 35.0,
    }
    return SynthSpec(**(values | overrides))


def _track(spec: SynthSpec, rate_hz: float, phase: float, noise_m: float, seed: int) -> Track:
    """Ground truth sampled at ``rate_hz``, the robot's start ``phase`` of a period after a sample."""
    start = spec.plan.start_delay_s + spec.motion_lag_s
    t = start - phase / rate_hz + np.arange(-3.0 * rate_hz, (spec.plan.motion_s + 3.0) * rate_hz) / rate_hz
    xyz, yaw = true_pose(spec, t)
    rng = np.random.default_rng(seed)
    xyz = xyz + rng.normal(0.0, noise_m, xyz.shape)
    yaw = yaw + rng.normal(0.0, noise_m / 0.1, yaw.shape)  # markers ~0.1 m from the body centre
    quat = np.column_stack([np.zeros(len(t)), np.zeros(len(t)), np.sin(yaw / 2), np.cos(yaw / 2)])
    return Track(t, xyz, quat, np.unwrap(yaw))


def _start(track: Track, plan: SquarePlan) -> Motion:
    motion = Motion()
    _find_start(track, plan.start_delay_s, motion)
    return motion


def _sweep(noise_m: float):
    for i, rate in enumerate(RATES_HZ):
        for j, phase in enumerate(PHASES):
            yield rate, phase, _track(_spec(), rate, phase, noise_m, seed=10 * i + j)


def test_constant_speed_start_is_found_exactly_at_every_rate_and_phase():
    truth = SHORT.start_delay_s + 0.05
    errors = [_start(track, SHORT).start_s - truth for _, _, track in _sweep(0.0)]
    assert max(abs(e) for e in errors) < 1e-6, [f"{e * 1e3:+.3f} ms" for e in errors]


@pytest.mark.parametrize("noise_m", [0.2e-3, 0.5e-3])
def test_noisy_start_is_not_biased_late(noise_m):
    """The old clamp to the last sample within the noise floor made every start late at 360 Hz
    (+1.4 to +4.5 ms at 0.2 mm, +8 to +12 ms at 0.5 mm); what is left is noise either way."""
    truth = SHORT.start_delay_s + 0.05
    errors = np.array([_start(track, SHORT).start_s - truth for _, _, track in _sweep(noise_m)])
    speed = SHORT.linear_speed_mps
    # one sample's noise is noise / speed in time (0.6 ms at 0.2 mm); the fit extrapolates a few samples
    assert np.max(np.abs(errors)) < 10 * noise_m / speed, errors
    assert abs(np.mean(errors)) < 2 * noise_m / speed, errors


def _lap_end_figures(track: Track) -> Drift:
    motion = _start(track, SHORT)
    _calibrate_heading(track, SHORT, motion, MAX_GAP_S)
    motion.laps_completed = SHORT.laps
    return drift_metrics(track, motion, SHORT, MAX_GAP_S)[0]


def test_lap_end_figures_carry_no_interpolation_bias_across_the_step_of_speed():
    """At a lap end the robot ends a turn (position still, heading turning) and starts a side
    (position moving, heading still); across the step linear interpolation was off by up to
    speed / (4 rate): 0.8 mm and 0.075 deg at 100 Hz."""
    shift = math.hypot(*SHIFT)
    for rate, phase, track in _sweep(0.0):
        d = _lap_end_figures(track)
        where = f"{rate} Hz, phase {phase}"
        assert d.closing is not None
        assert d.at_lap_end_m == pytest.approx(shift, abs=1e-6), where
        assert d.per_lap[-1].at_lap_end_m == pytest.approx(shift, abs=1e-6), where
        assert d.heading_change_at_lap_end_deg == pytest.approx(ROTATION_DEG, abs=1e-4), where
        assert d.closing.dx_m == pytest.approx(SHIFT[0], abs=1e-6), where
        assert d.closing.dy_m == pytest.approx(SHIFT[1], abs=1e-6), where
        assert d.closing.heading_deg == pytest.approx(ROTATION_DEG, abs=1e-4), where


@pytest.mark.parametrize("noise_m", [0.2e-3, 0.5e-3])
def test_noisy_lap_end_figures_stay_within_their_noise(noise_m):
    shift = math.hypot(*SHIFT)
    for rate, phase, track in _sweep(noise_m):
        d = _lap_end_figures(track)
        samples = 0.1 * rate  # in each boundary fit
        # each end point is a line fit: about 2 noise / sqrt(samples) per axis, two end points
        bound = 4 * 2 * noise_m / math.sqrt(samples) * math.sqrt(2)
        assert d.at_lap_end_m is not None
        assert abs(d.at_lap_end_m - shift) < bound, (rate, phase, d.at_lap_end_m)


@pytest.mark.parametrize("rate_hz", [100.0, 120.0, 360.0])
@pytest.mark.parametrize("phase", [0.0, 0.3, 0.7])
def test_a_perfect_robot_has_no_error_at_any_rate_and_phase(tmp_path, rate_hz, phase):
    """End to end through the bags: start, APE, lap-end drift, closing error all zero."""
    start = SHORT.start_delay_s + 0.05
    # first mocap sample at -mocap_lead_s + mocap_phase_s; put the start `phase` of a period after one
    lead = 2.0
    offset = ((start + lead) * rate_hz - phase) % 1.0 / rate_hz
    spec = SynthSpec(plan=SHORT, mocap_rate_hz=rate_hz, mocap_phase_s=offset, world_yaw_deg=-40.0)
    truth = synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    assert m.motion.start_s == pytest.approx(truth.motion_start_s, abs=1e-6)
    assert m.ape.rmse_m < 1e-6 and m.ape.max_m < 1e-6
    assert m.drift.at_lap_end_m < 1e-6
    assert abs(m.drift.heading_change_at_lap_end_deg) < 1e-4
    assert m.drift.closing.distance_m < 1e-6
