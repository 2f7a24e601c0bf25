"""Mocap poses on their frames' capture time: a known capture-clock offset and drift plus receipt
jitter; the mapped capture times must recover the true times, the receipt times must not."""

import re

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.loading.mocaptime import MocapTime, retime_poses
from fieldtest.analysis.loading.trialdata import load_trial
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.clocksync import fit_one_way_clock
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

SHORT = SquarePlan(laps=1, side_duration_s=1.5, turn_rate_dps=90.0)


@pytest.mark.parametrize("rate_hz", [100.0, 240.0])
@pytest.mark.parametrize("drift_ppm", [-150.0, 0.0, 80.0])
@pytest.mark.parametrize("jitter_s", [0.002, 0.02])
def test_one_way_fit_recovers_offset_and_drift(rate_hz, drift_ppm, jitter_s):
    rng = np.random.default_rng([int(rate_hz), int(drift_ppm + 1000), int(jitter_s * 1e4)])
    true_s = np.arange(0.0, 60.0, 1.0 / rate_hz)  # host time of each capture
    capture_s = 3600.0 + true_s * (1.0 + drift_ppm * 1e-6)  # the sender's clock: offset and drift
    delay_s, jitter = 0.004, rng.uniform(0.0, jitter_s, len(true_s))
    receipt_s = true_s + delay_s + jitter
    fit = fit_one_way_clock(capture_s, receipt_s - capture_s)
    mapped_s = capture_s + fit.receiver_minus_sender_s(capture_s)
    error = mapped_s - (true_s + delay_s)  # the fastest frame's delay lands in the offset
    tolerance = 0.05 * jitter_s
    assert np.max(np.abs(error)) < tolerance
    assert np.percentile(np.abs(receipt_s - (true_s + delay_s)), 99) > 10 * tolerance
    assert fit.drift * 1e6 == pytest.approx(-drift_ppm / (1 + drift_ppm * 1e-6), abs=jitter_s * 1e6 / 60)


def test_one_way_fit_ignores_a_held_up_window():
    """A second in which every frame came 50 ms late (a stall) does not bend the line."""
    true_s = np.arange(0.0, 30.0, 1 / 120)
    receipt_s = true_s + 0.003 + np.where((true_s >= 10) & (true_s < 12), 0.05, 0.0)
    fit = fit_one_way_clock(true_s, receipt_s - true_s)
    assert fit.offset_s == pytest.approx(0.003, abs=1e-6)
    assert fit.drift == pytest.approx(0.0, abs=1e-7)


def _true_ns(spec: SynthSpec, n: int) -> np.ndarray:
    t_s = -spec.mocap_lead_s + spec.mocap_phase_s + np.arange(n) / spec.mocap_rate_hz
    return spec.stream_start_ns + np.round((t_s + spec.mocap_delay_s) * 1e9).astype(np.int64)


@pytest.mark.parametrize(
    "rate_hz, drift_ppm, offset_s, jitter_s",
    [(120.0, 0.0, 0.0, 0.02), (240.0, 120.0, 5000.0, 0.01), (100.0, -60.0, 12.5, 0.005)],
)
def test_trial_poses_on_capture_time(tmp_path, rate_hz, drift_ppm, offset_s, jitter_s):
    spec = SynthSpec(
        plan=SHORT,
        mocap_rate_hz=rate_hz,
        mocap_delay_s=0.003,
        mocap_delay_jitter_s=jitter_s,
        mocap_clock_offset_s=offset_s,
        mocap_clock_drift_ppm=drift_ppm,
        mocap_phase_s=0.0031,
    )
    synthesize(tmp_path / "trial", spec)
    capture = load_trial(tmp_path / "trial")
    receipt = load_trial(tmp_path / "trial", mocap_time="receipt")
    true_ns = _true_ns(spec, len(capture.poses.t_ns))
    capture_error = (capture.poses.t_ns - true_ns) / 1e9
    receipt_error = (receipt.poses.t_ns - true_ns) / 1e9
    tolerance = 0.1 * jitter_s
    assert np.max(np.abs(capture_error)) < tolerance
    assert np.max(np.abs(receipt_error)) > 5 * tolerance
    section = capture.mocap_time
    assert section.axis == "capture"
    assert section.delay_median_s == pytest.approx(jitter_s / 2, abs=tolerance)
    assert section.delay_p99_s == pytest.approx(0.99 * jitter_s, abs=tolerance)
    assert section.drift_ppm == pytest.approx(-drift_ppm, abs=jitter_s * 1e6 / 10)
    assert receipt.mocap_time == MocapTime(axis="receipt", reason="asked for (--mocap-time receipt)")


def test_metrics_and_report_name_the_time_axis(tmp_path):
    spec = SynthSpec(plan=SHORT, mocap_delay_jitter_s=0.01, mocap_clock_offset_s=100.0)
    synthesize(tmp_path / "trial", spec)
    metrics = analyze_trial(tmp_path / "trial", plots=False, write=False)
    section = metrics.mocap.time
    assert section.axis == "capture"
    assert 0.004 < section.delay_median_s < 0.006
    text = "\n".join(report_lines(metrics))
    assert "Time axis: the frames' capture time" in text
    assert re.search(r"median 4\.\d\d ms, p99 9\.[89]\d ms", text), text


def test_recording_without_capture_stamps_keeps_receipt_time(tmp_path):
    """A mocap bag without frames (or from before capture stamps) is read on receipt time, and says so."""
    spec = SynthSpec(plan=SHORT, write_frames=False, mocap_delay_jitter_s=0.01)
    synthesize(tmp_path / "trial", spec)
    data = load_trial(tmp_path / "trial")
    assert data.mocap_time.axis == "receipt"
    assert "no capture stamps" in data.mocap_time.reason
    metrics = analyze_trial(tmp_path / "trial", plots=False, write=False)
    text = "\n".join(report_lines(metrics))
    assert "Time axis: receipt time (no capture stamps" in text


def test_a_capture_clock_that_restarts_keeps_receipt_time(tmp_path):
    """Motive restarted mid-recording: its timestamps start again from 0, no line maps them."""
    synthesize(tmp_path / "trial", SynthSpec(plan=SHORT, mocap_clock_offset_s=200.0))
    data = load_trial(tmp_path / "trial", mocap_time="receipt")
    half = len(data.frames.capture_s) // 2
    data.frames.capture_s[half:] -= 200.0
    poses, section = retime_poses(data.poses, data.frames)
    assert section.axis == "receipt" and "went back 200 s" in section.reason
    assert poses is data.poses
    data.frames.capture_s[half:] += 200.0
    assert retime_poses(data.poses, data.frames)[1].axis == "capture"
