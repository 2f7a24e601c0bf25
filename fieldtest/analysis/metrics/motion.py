"""Ground-truth track, motion start, heading calibration and lap segmentation (docs/analysis.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fieldtest.analysis.loading.trialdata import Poses, TrialData, quat_multiply, quat_yaw
from fieldtest.analysis.metrics.latency import ClockModel
from fieldtest.analysis.metrics.summarystats import circular_mean, interp_with_gaps, wrap_angle
from fieldtest.plan import MOTION_START_MIN_M, MOTION_START_SUSTAIN_S, SquarePlan

REST_WINDOW_S = 1.0  # rest pose: ground truth in the last second before the first moving command
MIN_NOISE_FLOOR_M = 0.001
# A robot on a lab floor changes height by millimetres while it drives metres: more than this much
# vertical spread (and this fraction of the horizontal one) means the poses are not Z-up.
MAX_VERTICAL_M = 0.1
MAX_VERTICAL_FRACTION = 0.2


@dataclass
class Track:
    """Valid ground truth on the host clock in stream seconds; yaw unwrapped (radians)."""

    t_s: np.ndarray
    xyz: np.ndarray
    quat_xyzw: np.ndarray
    yaw: np.ndarray

    @property
    def xy(self) -> np.ndarray:
        return self.xyz[:, :2]

    def __len__(self) -> int:
        return len(self.t_s)


def build_track(poses: Poses, stream_start_ns: int, clock: ClockModel) -> Track:
    t_ns = clock.to_host_ns(poses.t_ns) if poses.clock == "robot" else poses.t_ns.astype(float)
    t_s = (t_ns - stream_start_ns) / 1e9
    return Track(t_s, poses.xyz, poses.quat_xyzw, np.unwrap(quat_yaw(poses.quat_xyzw)))


@dataclass
class Motion:
    """Where and when the square starts, and how the laps fall on the ground truth."""

    start_s: float | None = None  # stream time of motion start (ground truth)
    first_command_s: float | None = None  # first non-zero command sent (host clock)
    first_received_s: float | None = None  # first non-zero command received (robot, on host clock)
    last_command_s: float | None = None  # last non-zero command sent (host clock)
    rest_xy: np.ndarray | None = None
    noise_floor_m: float | None = None
    body_yaw_offset: float = 0.0  # added to the rigid-body yaw to get the driving direction
    start_xy: np.ndarray | None = None
    start_heading: float = 0.0  # driving direction at motion start (world frame)
    laps_commanded: int = 0
    laps_observed: int = 0  # laps whose time span the ground truth covers
    laps_completed: int = 0
    lap_windows: list[tuple[float, float]] = field(default_factory=list)  # completed laps, stream s
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the figures are not to be trusted (partial)

    def found_start_s(self) -> float:
        """``start_s``, for the steps that run only once the motion start was found."""
        if self.start_s is None:
            raise ValueError("the motion start was not found")
        return self.start_s

    def to_start_frame(self, xy: np.ndarray) -> np.ndarray:
        """World x,y into the start frame: origin at the start, x along the start driving direction."""
        c, s = math.cos(-self.start_heading), math.sin(-self.start_heading)
        d = np.asarray(xy) - self.start_xy
        return np.column_stack([c * d[:, 0] - s * d[:, 1], s * d[:, 0] + c * d[:, 1]])

    def rotate_to_start_frame(self, vec: np.ndarray) -> np.ndarray:
        c, s = math.cos(-self.start_heading), math.sin(-self.start_heading)
        return np.array([c * vec[0] - s * vec[1], s * vec[0] + c * vec[1]])


def moving_commands_s(data: TrialData, clock: ClockModel) -> tuple[float | None, float | None, float | None]:
    """Stream times of the first non-zero command as sent (host) and as received (robot -> host clock),
    and of the last non-zero command sent."""
    start = data.stream_start_ns
    sent = received = last = None
    cmds = data.commands
    if cmds is not None:
        moving = np.flatnonzero((cmds.linear != 0) | (cmds.angular != 0))
        if len(moving):
            sent = float((cmds.sent_ns[moving].min() - start) / 1e9)
            last = float((cmds.sent_ns[moving].max() - start) / 1e9)
    rec = data.receipts
    if rec is not None:
        moving = np.flatnonzero((rec.linear != 0) | (rec.angular != 0))
        if len(moving):
            received = float((clock.to_host_ns(rec.received_ns[moving]).min() - start) / 1e9)
    return sent, received, last


def detect_motion(track: Track, data: TrialData, clock: ClockModel, max_gap_s: float) -> Motion:
    plan = data.plan
    motion = Motion()
    motion.first_command_s, motion.first_received_s, motion.last_command_s = moving_commands_s(data, clock)
    motion.laps_commanded = laps_commanded(data)
    if len(track) < 3:
        motion.notes.append("too few ground-truth samples to find the motion start")
        return motion
    _check_z_up(track, motion)
    rest_until = motion.first_command_s if motion.first_command_s is not None else plan.start_delay_s
    _find_start(track, rest_until, motion)
    if motion.start_s is None:
        return motion
    _calibrate_heading(track, plan, motion, max_gap_s)
    _segment_laps(track, plan, motion, max_gap_s)
    if motion.first_command_s is not None:
        lag = motion.start_s - motion.first_command_s
        if lag < -0.05:
            motion.notes.append(
                f"ground truth starts moving {-lag:.3f} s before the first moving command was sent "
                "(clocks not aligned, or the robot was pushed)"
            )
        elif lag > 1.0:
            motion.notes.append(f"the robot started moving {lag:.3f} s after the first moving command")
    return motion


def _check_z_up(track: Track, motion: Motion) -> None:
    """A bag's up axis is recorded nowhere: a Y-up bag read as Z-up drives up and down the walls."""
    spread = np.percentile(track.xyz, 99, axis=0) - np.percentile(track.xyz, 1, axis=0)
    vertical, horizontal = float(spread[2]), float(max(spread[0], spread[1]))
    if vertical > MAX_VERTICAL_M and vertical > MAX_VERTICAL_FRACTION * horizontal:
        motion.problems.append(
            f"ground truth spreads {vertical:.2f} m vertically against {horizontal:.2f} m horizontally: "
            "the poses are not Z-up (Motive streams Y-up by default: --up-axis y)"
        )


def motion_end_s(track: Track, motion: Motion, plan: SquarePlan) -> float:
    """End of the commanded motion on the ground-truth time line (within the recording)."""
    start_s = motion.found_start_s()
    end = start_s + plan.motion_s
    if motion.last_command_s is not None and motion.first_command_s is not None:
        commanded = motion.last_command_s + plan.tick_s - motion.first_command_s
        end = min(end, start_s + commanded)
    return float(min(end, track.t_s[-1]))


def _find_start(track: Track, rest_until: float, motion: Motion) -> None:
    t, xy = track.t_s, track.xy
    rest = (t >= rest_until - REST_WINDOW_S) & (t <= rest_until)
    if not np.any(rest):
        before = np.flatnonzero(t <= rest_until)
        rest = np.zeros(len(t), dtype=bool)
        rest[before[-1] if len(before) else 0] = True
        motion.notes.append(
            "no ground truth in the second before the first moving command; rest pose from one sample"
        )
    rest_xy = np.median(xy[rest], axis=0)
    noise = float(np.sqrt(np.mean(np.sum((xy[rest] - rest_xy) ** 2, axis=1))))
    floor = max(MIN_NOISE_FLOOR_M, 5.0 * noise)
    move = max(MOTION_START_MIN_M, 3.0 * floor)
    first = int(np.flatnonzero(rest)[0])
    dist = np.linalg.norm(xy - rest_xy, axis=1)
    moving = np.flatnonzero((dist > move) & (np.arange(len(t)) >= first))
    later, _ = interp_with_gaps(t, dist, t[moving] + MOTION_START_SUSTAIN_S, max_gap=np.inf)
    sustained = moving[~(later <= move)]  # NaN (past the end) counts as sustained
    motion.rest_xy, motion.noise_floor_m = rest_xy, floor
    if len(sustained) == 0:
        motion.notes.append(f"the robot never moved more than {move * 1000:.0f} mm from its rest pose")
        return
    k_move = int(sustained[0])
    still = np.flatnonzero(dist[: k_move + 1] <= floor)
    still = still[still >= first]
    k_rest = int(still[-1]) if len(still) else first
    motion.start_s = _extrapolated_start(t, dist, k_rest, k_move, floor)


def _extrapolated_start(t: np.ndarray, dist: np.ndarray, k_rest: int, k_move: int, floor: float) -> float:
    """Where the straight line through the samples between leaving the noise floor and the move
    threshold (at least two) reaches distance 0.

    Sample ``k_rest`` (within the floor) may already be moving: at speed v the robot stays within the
    floor for floor / v after the start. So the start may lie before it, but not so far before that the
    robot would have been twice the floor away by then (a bound against a noisy, flat fit); and not after
    the first sample outside the floor.
    """
    a = min(k_rest + 1, k_move)
    fit = np.arange(a, min(max(k_move, a + 1), len(t) - 1) + 1)
    if len(fit) < 2:
        return float(t[a])
    slope, at_a = np.polyfit(t[fit] - t[a], dist[fit], 1)
    if slope <= 0:
        return float(t[a])
    t0 = t[a] - at_a / slope
    return float(np.clip(t0, t[k_rest] - 2.0 * floor / slope, t[a]))


def _calibrate_heading(track: Track, plan: SquarePlan, motion: Motion, max_gap_s: float) -> None:
    """Rigid-body yaw vs driving direction, from the first side (the robot drives straight forward)."""
    t0 = motion.found_start_s()
    (p0, p1), valid = interp_with_gaps(track.t_s, track.xy, np.array([t0, t0 + plan.side_s]), max_gap_s)
    (yaw0,), _ = interp_with_gaps(track.t_s, track.yaw, np.array([t0]), max_gap_s)
    on_side = (track.t_s >= t0) & (track.t_s <= t0 + plan.side_s)
    body = circular_mean(wrap_angle(track.yaw[on_side]))
    chord = np.asarray(p1) - np.asarray(p0)
    if not valid.all() or body is None or np.linalg.norm(chord) < 0.5 * plan.side_m:
        motion.notes.append(
            "first side not covered by the ground truth: rigid-body yaw taken as the driving direction"
        )
        body, travel = 0.0, 0.0
    else:
        travel = math.atan2(chord[1], chord[0])
    motion.body_yaw_offset = float(wrap_angle(travel - body))
    motion.start_xy = np.asarray(p0) if valid[0] else track.xy[np.argmin(np.abs(track.t_s - t0))]
    yaw_start = yaw0 if np.isfinite(yaw0) else track.yaw[np.argmin(np.abs(track.t_s - t0))]
    motion.start_heading = float(wrap_angle(yaw_start + motion.body_yaw_offset))


def laps_commanded(data: TrialData) -> int:
    """Laps whose every command the host sent (all laps if there is no host bag)."""
    plan = data.plan
    if data.commands is None:
        return plan.laps
    ticks = data.commands.seq[data.commands.seq < plan.n_ticks()]  # the stop burst is numbered after
    last = int(ticks.max()) if len(ticks) else -1
    done = 0
    for lap in range(plan.laps):
        last_tick = round((plan.lap_start_s(lap) + plan.lap_s) * plan.command_rate_hz) - 1
        if last >= last_tick:
            done = lap + 1
    return done


def _segment_laps(track: Track, plan: SquarePlan, motion: Motion, max_gap_s: float) -> None:
    t0 = motion.found_start_s()
    last_seen = float(track.t_s[-1])
    observed = 0
    for lap in range(plan.laps):
        if last_seen >= t0 + (lap + 1) * plan.lap_s - max_gap_s:
            observed = lap + 1
    motion.laps_observed = observed
    motion.laps_completed = min(observed, motion.laps_commanded)
    motion.lap_windows = [
        (t0 + k * plan.lap_s, t0 + (k + 1) * plan.lap_s) for k in range(motion.laps_completed)
    ]


def corrected_quaternions(track: Track, body_yaw_offset: float) -> np.ndarray:
    """Rigid-body orientations turned about their own z so their x axis is the driving direction."""
    half = body_yaw_offset / 2.0
    turn = np.array([0.0, 0.0, math.sin(half), math.cos(half)])
    return quat_multiply(track.quat_xyzw, np.broadcast_to(turn, track.quat_xyzw.shape))
