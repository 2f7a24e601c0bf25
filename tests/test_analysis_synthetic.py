"""Synthetic trials with analytically known answers: drift, corners, heading, closing error, gaps,
clock offset, latency and loss must come out within 1 mm / 0.1 deg / 10 us."""

import csv
import math

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

# A short square so the tests stay fast: 1.5 s sides, 1 s turns, 10 s laps, 3 laps.
SHORT = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
SHIFT = np.array([0.031, -0.017])
ROTATION_DEG = 2.5

MM, DEG, US = 1e-3, 0.1, 10e-6


def _rot(theta_deg: float) -> np.ndarray:
    t = math.radians(theta_deg)
    return np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])


def _read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    """Last lap shifted and rotated about the start; the robot placed and turned in the mocap world,
    its rigid body yawed 7 deg off the driving direction."""
    spec = SynthSpec(
        plan=SHORT,
        last_lap_shift_m=tuple(SHIFT),
        last_lap_rotation_deg=ROTATION_DEG,
        world_xy=(1.3, -0.6),
        world_yaw_deg=-65.0,
        body_yaw_offset_deg=7.0,
        motion_lag_s=0.0437,
    )
    trial = tmp_path_factory.mktemp("shifted") / "trial"
    truth = synthesize(trial, spec)
    metrics = analyze_trial(trial, plots=False)
    return trial, truth, metrics


def _expected_curve(tau: np.ndarray) -> np.ndarray:
    """|R p + s - p| for the ideal lap-1 position p at each time into the lap (plan frame = start frame)."""
    p = SHORT.ideal_pose(SHORT.start_delay_s + tau)[:, :2]
    return np.linalg.norm(p @ _rot(ROTATION_DEG).T + SHIFT - p, axis=1)


def test_motion_start_and_heading_calibration(shifted):
    _, truth, m = shifted
    assert m.partial is False, m.partial_reasons
    assert m.motion.start_s == pytest.approx(truth.motion_start_s, abs=US)
    assert m.motion.start_lag_s == pytest.approx(0.0437, abs=US)
    assert m.motion.body_yaw_offset_deg == pytest.approx(7.0, abs=DEG)
    assert m.motion.start_heading_deg == pytest.approx(-65.0, abs=DEG)
    assert m.progress.laps_completed == 3


def test_drift_curve_and_summary_match_the_known_transform(shifted):
    trial, _, m = shifted
    rows = _read_csv(trial / "analysis" / "drift_curve.csv")
    tau = np.array([float(r["tau_s"]) for r in rows])
    measured = np.array([float(r["lap3_vs_lap1_m"]) for r in rows])
    expected = _expected_curve(tau)
    assert np.max(np.abs(measured - expected)) < MM
    d = m.drift
    assert d.last_lap == 3 and d.excluded_points == 0
    assert d.mean_m == pytest.approx(expected.mean(), abs=MM)
    assert d.rms_m == pytest.approx(np.sqrt(np.mean(expected**2)), abs=MM)
    assert d.max_m == pytest.approx(expected.max(), abs=MM)
    # at lap end lap 3 is back at its (moved) start point: the shift itself
    assert d.at_lap_end_m == pytest.approx(np.hypot(*SHIFT), abs=MM)
    assert d.heading_change_deg == pytest.approx(ROTATION_DEG, abs=DEG)
    assert d.heading_change_at_lap_end_deg == pytest.approx(ROTATION_DEG, abs=DEG)


def test_corner_displacements_and_closing_error(shifted):
    _, _, m = shifted
    corners = SHORT.ideal_pose(SHORT.corner_times_s(0))[:, :2]
    expected = corners @ _rot(ROTATION_DEG).T + SHIFT - corners
    for got, want in zip(m.drift.corners, expected, strict=True):
        assert got.dx_m == pytest.approx(want[0], abs=MM)
        assert got.dy_m == pytest.approx(want[1], abs=MM)
        assert got.distance_m == pytest.approx(np.hypot(*want), abs=MM)
    closing = m.drift.closing
    assert closing.dx_m == pytest.approx(SHIFT[0], abs=MM)
    assert closing.dy_m == pytest.approx(SHIFT[1], abs=MM)
    assert closing.heading_deg == pytest.approx(ROTATION_DEG, abs=DEG)


def test_a_perfect_trial_has_no_drift_and_no_error_against_the_ideal_square(tmp_path):
    synthesize(tmp_path / "t", SynthSpec(plan=SHORT, world_yaw_deg=120.0, body_yaw_offset_deg=-3.0))
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    assert m.drift.max_m < 1e-6
    assert abs(m.drift.heading_change_deg) < 1e-6
    assert m.drift.closing.distance_m < 1e-6
    assert m.ape.rmse_m < 1e-6 and m.ape.max_m < 1e-6
    assert m.ape.poses == pytest.approx(SHORT.motion_s * 120, abs=2)


def test_lost_and_invalid_frames_are_counted_and_long_gaps_excluded(tmp_path):
    # lap 3 runs 21.0..31.0 s (start delay 1 s, lag 0.05 s); the gaps fall on its sides
    spec = SynthSpec(
        plan=SHORT,
        last_lap_shift_m=tuple(SHIFT),
        lost_frames=[(22.0, 0.5), (27.0, 0.05)],  # 60 frames, 6 frames (bridged)
        invalid_frames=[(24.2, 0.25)],  # 30 frames
    )
    synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    mc = m.mocap
    assert mc.lost_in_transit == 60 + 6
    assert mc.tracking_invalid == 30 and mc.invalid_runs == 1
    assert mc.in_analysis_gaps == 3
    assert mc.in_analysis_bridged_gaps == 1 and mc.in_analysis_excluded_gaps == 2
    assert mc.in_analysis_missing_samples == 60 + 6 + 30
    d = m.drift
    # grid points in the two long holes (0.5 s + 0.25 s at 10 ms) are left out, not filled in
    assert d.excluded_points == pytest.approx(50 + 25, abs=4)
    rows = _read_csv(tmp_path / "t" / "analysis" / "drift_curve.csv")
    measured = np.array(
        [float(r["lap3_vs_lap1_m"]) if r["lap3_vs_lap1_m"] != "nan" else np.nan for r in rows]
    )
    ok = np.isfinite(measured)
    # a pure shift: every remaining point, bridged gap included, is |shift| away
    assert np.max(np.abs(measured[ok] - np.hypot(*SHIFT))) < MM
    assert np.count_nonzero(~ok) == d.excluded_points
    assert any("drift grid points" in w for w in m.warnings) is False  # 75 of 1001 is under 10 %


def test_clock_offset_and_drift_are_corrected_to_10_us(tmp_path):
    spec = SynthSpec(
        plan=SHORT,
        clock_offset_s=1.234567,
        clock_drift_ppm=40.0,
        latency_s=0.004,
        latency_jitter_s=0.006,
        live_offset_error_s=0.0005,  # the robot's own estimate is 0.5 ms off
        probe_extra_delay_s=0.004,
    )
    truth = synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    clock = m.latency.clock
    assert clock.method == "probes"
    assert clock.drift_ppm == pytest.approx(40.0, abs=0.5)
    rows = [r for r in _read_csv(tmp_path / "t" / "analysis" / "latency.csv") if r["received"] == "1"]
    errors = [float(r["one_way_ms"]) / 1e3 - truth.one_way_s[int(r["seq"])] for r in rows]
    assert len(errors) == len(truth.one_way_s)
    assert max(abs(e) for e in errors) < US
    live_errors = [float(r["live_one_way_ms"]) / 1e3 - truth.one_way_s[int(r["seq"])] for r in rows]
    assert np.median(live_errors) == pytest.approx(0.0005, abs=US)
    true_sorted = np.sort(list(truth.one_way_s.values()))
    n = len(true_sorted)
    ow = m.latency.one_way_ms
    assert ow.median / 1e3 == pytest.approx(true_sorted[n // 2], abs=US)
    assert ow.p99 / 1e3 == pytest.approx(true_sorted[min(n - 1, n * 99 // 100)], abs=US)
    assert ow.min / 1e3 == pytest.approx(true_sorted[0], abs=US)
    assert ow.max / 1e3 == pytest.approx(true_sorted[-1], abs=US)
    # probes: forward and back each at least 2 ms
    assert m.latency.round_trip_ms.min == pytest.approx(4.0, abs=0.01)


def test_lost_commands_are_counted_from_sequence_numbers(tmp_path):
    lost = (5, 6, 7, 100, 250)
    truth = synthesize(tmp_path / "t", SynthSpec(plan=SHORT, lost_seqs=lost))
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    lat = m.latency
    assert lat.lost == len(lost)
    assert lat.lost_spans == [(5, 7), (100, 100), (250, 250)]
    assert lat.commands_sent == truth.sent
    assert lat.commands_received == truth.sent - len(lost)
    assert lat.loss_ratio == pytest.approx(len(lost) / truth.sent)
    rows = _read_csv(tmp_path / "t" / "analysis" / "latency.csv")
    assert sorted(int(r["seq"]) for r in rows if r["received"] == "0") == list(lost)


@pytest.mark.parametrize(
    "variant",
    [
        {"mocap_up_axis": "y"},
        {"pose_bag": "robot", "clock_offset_s": -2.5, "write_frames": False},
        {"pose_topic": "/vrpn_mocap/tb4/pose", "write_frames": False},
    ],
    ids=["y-up", "robot-clock", "vrpn-topic"],
)
def test_other_ground_truth_sources_give_the_same_drift(tmp_path, shifted, variant):
    _, _, reference = shifted
    spec = SynthSpec(
        plan=SHORT,
        last_lap_shift_m=tuple(SHIFT),
        last_lap_rotation_deg=ROTATION_DEG,
        world_xy=(1.3, -0.6),
        world_yaw_deg=-65.0,
        body_yaw_offset_deg=7.0,
        motion_lag_s=0.0437,
        **variant,
    )
    synthesize(tmp_path / "t", spec)
    options = {}
    if "mocap_up_axis" in variant:
        options["up_axis"] = "y"
    if "pose_topic" in variant:
        options["pose_topic"] = variant["pose_topic"]
    if "pose_bag" in variant:
        options["pose_topic"] = "/mocap/pose"
    m = analyze_trial(tmp_path / "t", plots=False, report=False, **options)
    assert m.partial is False, m.partial_reasons
    for key in ("mean_m", "max_m", "at_lap_end_m", "heading_change_deg"):
        assert getattr(m.drift, key) == pytest.approx(getattr(reference.drift, key), abs=1e-6)
    assert m.motion.start_s == pytest.approx(reference.motion.start_s, abs=US)
    assert m.ape.rmse_m == pytest.approx(reference.ape.rmse_m, abs=1e-6)


def test_jitter_is_the_spread_of_inter_arrival_times_between_consecutive_commands(tmp_path):
    truth = synthesize(tmp_path / "t", SynthSpec(plan=SHORT, latency_jitter_s=0.004, lost_seqs=(50, 51, 52)))
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    lat = m.latency
    seqs = sorted(truth.one_way_s)
    gaps = [
        0.05 + truth.one_way_s[b] - truth.one_way_s[a]
        for a, b in zip(seqs, seqs[1:], strict=False)
        if b == a + 1 and b < SHORT.n_ticks()  # plan ticks: the stop burst has its own spacing
    ]
    assert lat.interarrival_ms.count == len(gaps)
    assert lat.jitter_ms / 1e3 == pytest.approx(np.std(gaps), abs=US)
    assert lat.interarrival_ms.max < 60.0  # the 200 ms hole of the lost commands is not jitter
    assert lat.interarrival_ms.min > 40.0  # nor the stop burst's 20 ms spacing


@pytest.mark.parametrize("stop_after_s", [None, 6.0], ids=["completed", "stopped"])
def test_synthetic_trial_ends_with_the_twin_hosts_stop_burst(tmp_path, stop_after_s):
    """The host bag ends as the twin host's does: STOP_BURST_COUNT zero commands, numbered from the
    plan's tick count, STOP_BURST_SPACING_S apart (fieldtest.names, used by fieldtest.endpoints.streamer)."""
    from fieldtest.analysis.loading.trialdata import load_trial
    from fieldtest.names import STOP_BURST_COUNT, STOP_BURST_SPACING_S

    synthesize(tmp_path / "t", SynthSpec(plan=SHORT, stop_after_s=stop_after_s))
    sent = load_trial(tmp_path / "t").commands
    burst = slice(-STOP_BURST_COUNT, None)
    n = SHORT.n_ticks()
    assert sent.seq[burst].tolist() == list(range(n, n + STOP_BURST_COUNT))
    assert not sent.linear[burst].any() and not sent.angular[burst].any()
    assert sent.seq[-STOP_BURST_COUNT - 1] < n  # the commands before it are plan ticks
    assert np.diff(sent.sent_ns[burst]) / 1e9 == pytest.approx(STOP_BURST_SPACING_S, abs=1e-6)


@pytest.mark.parametrize(
    "lost", [(), (50, 51, 52), tuple(range(10, 150, 3))], ids=["none", "a-run", "every-third"]
)
def test_ipdv_pairs_consecutive_sequence_numbers_that_both_arrived(tmp_path, lost):
    """Across a lost command the pair is not consecutive: its latency change is loss, not jitter."""
    truth = synthesize(tmp_path / "t", SynthSpec(plan=SHORT, latency_jitter_s=0.004, lost_seqs=lost))
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    seqs = sorted(truth.one_way_s)
    pairs = [(a, b) for a, b in zip(seqs, seqs[1:], strict=False) if b == a + 1 and b < SHORT.n_ticks()]
    expected = np.mean([abs(truth.one_way_s[b] - truth.one_way_s[a]) for a, b in pairs])
    assert m.latency.ipdv_ms / 1e3 == pytest.approx(expected, abs=1e-7)
    assert m.latency.interarrival_ms.count == len(pairs)


def test_a_late_duplicate_counts_as_duplicate_and_as_out_of_order(tmp_path):
    """A copy arriving after newer commands is out of order too; a copy right behind its original
    (before the next command arrives) is only a duplicate. Latency is the first copy's."""
    spec = SynthSpec(plan=SHORT, duplicated=((40, 0.5), (41, 0.2), (90, 0.001)))
    truth = synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    lat = m.latency
    assert lat.receipts == truth.sent + 3
    assert lat.duplicates == 3 and lat.out_of_order == 2
    assert lat.commands_received == truth.sent and lat.lost == 0
    assert lat.one_way_ms.max / 1e3 == pytest.approx(spec.latency_s, abs=US)


@pytest.mark.parametrize("world_yaw_deg", [0.0, 45.0, 90.0])
def test_a_y_up_bag_read_as_z_up_is_flagged_not_analyzed_silently(tmp_path, world_yaw_deg):
    synthesize(tmp_path / "t", SynthSpec(plan=SHORT, mocap_up_axis="y", world_yaw_deg=world_yaw_deg))
    m = analyze_trial(tmp_path / "t", plots=False, report=False)
    assert m.partial is True
    assert any("not Z-up" in r and "--up-axis y" in r for r in m.partial_reasons), m.partial_reasons
    right = analyze_trial(tmp_path / "t", plots=False, report=False, up_axis="y")
    assert right.partial is False, right.partial_reasons


def test_invalid_runs_are_counted_over_received_frames(tmp_path):
    """Frames lost inside an invalid run neither split it nor count in its length."""
    spec = SynthSpec(plan=SHORT, invalid_frames=[(24.2, 0.25)], lost_frames=[(24.3, 0.05)])
    synthesize(tmp_path / "t", spec)
    mc = analyze_trial(tmp_path / "t", plots=False, report=False).mocap
    assert mc.lost_in_transit == 6
    assert mc.invalid_runs == 1
    assert mc.tracking_invalid == mc.longest_invalid_run_frames == 30 - 6


def test_a_frame_number_restart_or_garbage_number_is_a_jump_not_loss(tmp_path):
    spec = SynthSpec(
        plan=SHORT,
        lost_frames=[(5.0, 0.05)],  # 6 frames really lost
        renumber_frames=((12.0, 3),),  # Motive restarted
        garbage_frame_numbers=(20.0,),
    )
    synthesize(tmp_path / "t", spec)
    mc = analyze_trial(tmp_path / "t", plots=False, report=False).mocap
    assert mc.lost_in_transit == 6
    assert mc.frame_number_resets == 2  # the restart, and back down from the garbage number
    assert mc.frame_number_jumps == 1  # up to the garbage number


def test_the_analysis_and_the_recorder_share_the_frame_number_rule():
    from fieldtest.analysis.metrics import mocapgaps as gaps
    from fieldtest.natnet import protocol

    assert gaps.REORDER_WINDOW_FRAMES == protocol.REORDER_WINDOW_FRAMES
    assert gaps.MAX_FRAME_RATE_HZ == protocol.MAX_FRAME_RATE_HZ
    steps, elapsed = np.array([2, 60, 70, 1001, 1067, 1068]), np.array([0.01, 0.0, 0.0, 1.0, 1.0, 1.0])
    expected = [protocol.frame_step_is_loss(int(s), float(e)) for s, e in zip(steps, elapsed, strict=True)]
    assert gaps._plausible_loss(steps, elapsed).tolist() == expected
