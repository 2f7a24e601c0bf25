"""Synthetic trials with known answers: real trial directories written with BagWriter.

The robot follows ``plan.ideal_pose`` exactly, ``motion_lag_s`` behind the plan, placed anywhere in
the mocap world; the last driven lap can be shifted by a known vector and rotated by a known angle
about the start point (the laps in between change gradually, lap 1 not at all). Mocap rate, lost
and tracking-invalid frames, the robot's clock offset and drift, per-command latency, lost
commands, duplicated receipts, an early stop and cut-off bags are all options. Used by the tests and the benchmark.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fieldtest import rosmsg
from fieldtest.linkconfig import TransportConfig
from fieldtest.names import STOP_BURST_COUNT, STOP_BURST_SPACING_S
from fieldtest.plan import SquarePlan
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CMD_VEL_TOPIC,
    HOST_BAG,
    MOCAP_BAG,
    MOCAP_FRAMES_TOPIC,
    MOCAP_POSE_TOPIC,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    BagWriter,
    TrialOutcome,
    TrialRecord,
    TrialRequest,
    TwinSettings,
    write_trial,
)


@dataclass
class SynthSpec:
    name: str = "synth"
    plan: SquarePlan = field(default_factory=SquarePlan)
    middleware: str = "dds"
    security: str = "none"
    qos: str = "default"
    network: str = "loopback"
    repetition: int = 0
    seed: int = 0
    stream_start_ns: int = 1_750_000_000_000_000_000
    # ground truth
    mocap_rate_hz: float = 120.0
    mocap_phase_s: float = 0.0  # first frame this long after (stream start - mocap_lead_s)
    mocap_lead_s: float = 2.0
    mocap_tail_s: float = 2.0
    motion_lag_s: float = 0.05  # the robot executes the plan this long after the host sends it
    world_xy: tuple[float, float] = (0.8, -0.4)  # start position in the mocap world
    world_yaw_deg: float = 30.0  # start driving direction in the mocap world
    height_m: float = 0.12
    body_yaw_offset_deg: float = 0.0  # driving direction minus rigid-body yaw
    last_lap_shift_m: tuple[float, float] = (0.0, 0.0)  # in the start frame
    last_lap_rotation_deg: float = 0.0  # about the start point
    side_scale: float = 1.0  # every side driven this many times as long (a systematic error)
    turn_scale: float = 1.0  # every turn this many times as large
    mocap_noise_m: float = 0.0
    lost_frames: list[tuple[float, float]] = field(
        default_factory=list
    )  # (start_s, duration_s): never arrive
    invalid_frames: list[tuple[float, float]] = field(default_factory=list)  # arrive with tracking invalid
    renumber_frames: tuple[tuple[float, int], ...] = ()  # (stream_s, n): numbered n from there (restart)
    garbage_frame_numbers: tuple[float, ...] = ()  # the frame at this stream time has a wild number
    write_frames: bool = True
    pose_topic: str = MOCAP_POSE_TOPIC
    pose_bag: str = MOCAP_BAG  # or ROBOT_BAG: poses stamped with the robot clock (like the twin's truth)
    mocap_up_axis: str = "z"  # "y": positions and orientations written Y-up, as Motive streams by default
    # mocap stream timing: frames arrive (are stamped) mocap_delay_s plus uniform [0, jitter) after
    # capture; their capture stamps run on Motive's clock, offset and drifting from the host's
    mocap_delay_s: float = 0.0
    mocap_delay_jitter_s: float = 0.0
    mocap_clock_offset_s: float = 0.0  # Motive's clock at the first frame
    mocap_clock_drift_ppm: float = 0.0
    # link
    clock_offset_s: float = 0.0  # host - robot
    clock_drift_ppm: float = 0.0
    latency_s: float = 0.005  # minimum one-way latency
    latency_jitter_s: float = 0.0  # plus uniform [0, jitter) per command (seeded)
    latency_of: dict[int, float] = field(default_factory=dict)  # seq -> its one-way latency, instead
    live_offset_error_s: float = 0.0  # error of the robot's own offset estimate
    lost_seqs: tuple[int, ...] = ()
    duplicated: tuple[tuple[int, float], ...] = ()  # (seq, s after its first copy): received twice
    # seq -> s after its arrival the robot's receiver took it (the receipt's log time); else on arrival
    taken_late_of: dict[int, float] = field(default_factory=dict)
    # timing faults, each (from_s, to_s, seconds) over planned stream time: commands planned in
    # [from_s, to_s) leave the host that late (emission) / take that much longer on the link
    send_late: tuple[tuple[float, float, float], ...] = ()
    latency_steps: tuple[tuple[float, float, float], ...] = ()
    # ground truth from the Create 3 model driven by the commands at their arrival times (instead of
    # the plan's ideal path motion_lag_s late), then the last-lap shift/rotation: drift causes known
    truth_from_commands: bool = False
    # the base's systematic errors the model drives with there (wheel_diameter_ratio, wheelbase_ratio,
    # turn_slip, as Imperfections and twin settings name them), recorded in trial.yaml's twin settings
    base_errors: dict = field(default_factory=dict)
    probe_interval_s: float = 1.0
    probe_min_delay_s: float = 0.002  # one way
    probe_extra_delay_s: float = 0.003  # random extra per direction (every 5th probe has none)
    # how it ended
    stop_after_s: float | None = None  # the host stops streaming at this stream time
    end_reason: str | None = None  # default: "completed", or "host-stopped" with stop_after_s
    faults: list[dict] = field(default_factory=list)
    truncate: dict[str, float] = field(default_factory=dict)  # bag name -> fraction of the file kept
    link: dict = field(default_factory=lambda: {"rtt_median_ms": 0.1, "rtt_p99_ms": 0.3, "loss": 0.0})
    cpu: dict = field(default_factory=lambda: {"host": {"cpu_s": 1.2, "cpu_percent": 1.3}})


@dataclass
class SynthTruth:
    motion_start_s: float
    one_way_s: dict[int, float]  # seq -> true latency of the commands that arrived
    lost_seqs: list[int]
    laps_driven: int
    sent: int


def _rot(theta: float, xy: np.ndarray) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.column_stack([c * xy[:, 0] - s * xy[:, 1], s * xy[:, 0] + c * xy[:, 1]])


def last_lap_fraction(spec: SynthSpec, plan_s: np.ndarray, laps: int) -> np.ndarray:
    """How much of the last-lap transform applies at plan time: 0 in lap 1, 1 in the last lap."""
    plan = spec.plan
    if laps < 2:
        return np.zeros_like(plan_s)
    ramp_start, ramp_end = plan.lap_start_s(1), plan.lap_start_s(laps - 1)
    if ramp_end <= ramp_start:  # two laps: the whole of lap 2 is moved, lap 1 (to its end point) is not
        return (plan_s > ramp_start).astype(float)
    return np.clip((plan_s - ramp_start) / (ramp_end - ramp_start), 0.0, 1.0)


def laps_driven(spec: SynthSpec) -> int:
    plan = spec.plan
    if spec.stop_after_s is None:
        return plan.laps
    return max(0, min(plan.laps, int((spec.stop_after_s - plan.start_delay_s) // plan.lap_s)))


def true_pose(spec: SynthSpec, stream_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World (x, y, z) and driving yaw of the robot at stream times (host clock)."""
    plan = spec.plan
    plan_s = np.asarray(stream_s, dtype=float) - spec.motion_lag_s
    if spec.stop_after_s is not None:
        plan_s = np.minimum(plan_s, spec.stop_after_s)
    ideal = plan.ideal_pose(plan_s, spec.side_scale, spec.turn_scale)
    f = last_lap_fraction(spec, plan_s, laps_driven(spec) if spec.stop_after_s is not None else plan.laps)
    theta = f * math.radians(spec.last_lap_rotation_deg)
    c, s = np.cos(theta), np.sin(theta)
    x = c * ideal[:, 0] - s * ideal[:, 1] + f * spec.last_lap_shift_m[0]
    y = s * ideal[:, 0] + c * ideal[:, 1] + f * spec.last_lap_shift_m[1]
    yaw = ideal[:, 2] + theta
    world_yaw = math.radians(spec.world_yaw_deg)
    xy = _rot(world_yaw, np.column_stack([x, y])) + np.asarray(spec.world_xy)
    xyz = np.column_stack([xy, np.full(len(xy), spec.height_m)])
    return xyz, yaw + world_yaw


def model_pose(spec: SynthSpec, arrivals: list, stream_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World (x, y, z) and yaw of the Create 3 model (nominal unless ``base_errors``) driven by
    ``arrivals`` (stream s, v, w), then moved by the last-lap transform like ``true_pose``."""
    from fieldtest.twin.create3model import Create3Model, Imperfections, drive

    t, v, w = (np.array(c, dtype=float) for c in zip(*sorted(arrivals), strict=True))
    model = Create3Model("full", Imperfections(**spec.base_errors))
    path = drive(model, t, v, w, np.asarray(stream_s, dtype=float))
    plan_s = np.asarray(stream_s, dtype=float) - spec.motion_lag_s
    f = last_lap_fraction(spec, plan_s, spec.plan.laps)
    theta = f * math.radians(spec.last_lap_rotation_deg)
    c, s = np.cos(theta), np.sin(theta)
    x = c * path[:, 0] - s * path[:, 1] + f * spec.last_lap_shift_m[0]
    y = s * path[:, 0] + c * path[:, 1] + f * spec.last_lap_shift_m[1]
    world_yaw = math.radians(spec.world_yaw_deg)
    xy = _rot(world_yaw, np.column_stack([x, y])) + np.asarray(spec.world_xy)
    return np.column_stack([xy, np.full(len(xy), spec.height_m)]), path[:, 2] + theta + world_yaw


def _in_spans(t: np.ndarray, spans: list[tuple[float, float]]) -> np.ndarray:
    mask = np.zeros(len(t), dtype=bool)
    for start, duration in spans:
        mask |= (t >= start) & (t < start + duration)
    return mask


def synthesize(trial_dir: str | Path, spec: SynthSpec | None = None) -> SynthTruth:
    """Write a complete trial directory for ``spec``; returns the true answers."""
    spec = spec or SynthSpec()
    trial_dir = Path(trial_dir)
    if trial_dir.exists():
        shutil.rmtree(trial_dir)
    trial_dir.mkdir(parents=True)
    rng = np.random.default_rng(spec.seed)
    sent = _write_host(trial_dir / HOST_BAG, spec)
    with BagWriter(trial_dir / ROBOT_BAG) as robot:
        truth_latency, lost = _write_robot(robot, spec, sent, rng)
        arrivals = None
        if spec.truth_from_commands:  # (stream seconds of arrival, linear, angular) on the host clock
            arrivals = [
                ((ns - spec.stream_start_ns) / 1e9 + truth_latency[seq], lin, ang)
                for seq, ns, lin, ang in sent
                if seq in truth_latency
            ]
        pose_writer = robot if spec.pose_bag == ROBOT_BAG else None
        _write_mocap(trial_dir / MOCAP_BAG, spec, rng, pose_writer, arrivals)
    _write_record(trial_dir, spec)
    for bag, fraction in spec.truncate.items():
        cut_bag(trial_dir / bag, fraction)
    return SynthTruth(
        motion_start_s=spec.plan.start_delay_s + spec.motion_lag_s,
        one_way_s=truth_latency,
        lost_seqs=lost,
        laps_driven=laps_driven(spec),
        sent=len(sent),
    )


def _schedule(spec: SynthSpec) -> list[tuple[int, float, float, float]]:
    """(seq, stream time, linear, angular) of every command the host sends, stop burst included."""
    plan = spec.plan
    sched = plan.schedule()
    last = len(sched.seq)
    if spec.stop_after_s is not None:
        last = min(last, int(round(spec.stop_after_s * plan.command_rate_hz)))
    rows = [
        (int(sched.seq[i]), float(sched.t_s[i]), float(sched.linear_mps[i]), float(sched.angular_rps[i]))
        for i in range(last)
    ]
    first_zero_s = last / plan.command_rate_hz  # the next tick
    for k in range(STOP_BURST_COUNT):  # the twin host's burst
        rows.append((plan.n_ticks() + k, first_zero_s + k * STOP_BURST_SPACING_S, 0.0, 0.0))
    return rows


def _span_sum(spans: tuple[tuple[float, float, float], ...], t_s: float) -> float:
    return sum(value for start, end, value in spans if start <= t_s < end)


def _write_host(bag_dir: Path, spec: SynthSpec) -> list[tuple[int, int, float, float]]:
    sent = []
    with BagWriter(bag_dir) as writer:
        for seq, t_s, lin, ang in _schedule(spec):
            t_ns = spec.stream_start_ns + int(round((t_s + _span_sum(spec.send_late, t_s)) * 1e9))
            writer.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, t_ns, rosmsg.command(seq, t_ns, lin, ang))
            sent.append((seq, t_ns, lin, ang))
    return sent


def _offset_at(spec: SynthSpec, host_ns: np.ndarray | float) -> np.ndarray:
    """host - robot at a host time."""
    dt = (np.asarray(host_ns, dtype=float) - spec.stream_start_ns) / 1e9
    return spec.clock_offset_s + spec.clock_drift_ppm * 1e-6 * dt


def _write_robot(
    writer: BagWriter, spec: SynthSpec, sent: list[tuple[int, int, float, float]], rng: np.random.Generator
) -> tuple[dict[int, float], list[int]]:
    lost = sorted(set(spec.lost_seqs) & {s for s, *_ in sent})
    rows = []
    truth: dict[int, float] = {}
    for seq, sent_ns, lin, ang in sent:
        latency = spec.latency_s + (rng.uniform(0.0, spec.latency_jitter_s) if spec.latency_jitter_s else 0.0)
        latency += _span_sum(spec.latency_steps, (sent_ns - spec.stream_start_ns) / 1e9)
        latency = spec.latency_of.get(seq, latency)
        if seq in lost:
            continue
        received_host = sent_ns + int(round(latency * 1e9))
        received_robot = received_host - int(round(float(_offset_at(spec, received_host)) * 1e9))
        truth[seq] = (received_host - sent_ns) / 1e9
        rows.append((received_robot, received_host, seq, sent_ns, lin, ang))
        for copy_seq, later_s in spec.duplicated:
            if copy_seq == seq:
                later_ns = int(round(later_s * 1e9))
                rows.append((received_robot + later_ns, received_host + later_ns, seq, sent_ns, lin, ang))
    rows.sort()
    receipt = rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)
    sample = rosmsg.msg_class(rosmsg.CLOCK_OFFSET_SAMPLE)
    for received_robot, received_host, seq, sent_ns, lin, ang in rows:
        live = float(_offset_at(spec, received_host)) + spec.live_offset_error_s
        msg = receipt(
            seq=seq,
            sent=rosmsg.time_msg(sent_ns),
            received=rosmsg.time_msg(received_robot),
            clock_offset_s=live,
            latency_s=(received_robot - sent_ns) / 1e9 + live,
            twist=rosmsg.twist(lin, ang),
        )
        taken_robot = received_robot + int(round(spec.taken_late_of.get(seq, 0.0) * 1e9))
        writer.write(RECEIPTS_TOPIC, rosmsg.COMMAND_RECEIPT, taken_robot, msg)
    for i, (t1, t2, t3, t4) in enumerate(_probes(spec, rng)):
        offset = ((t2 - t1) + (t3 - t4)) / 2e9
        delay = ((t4 - t1) - (t3 - t2)) / 1e9
        msg = sample(
            id=i,
            t1=rosmsg.time_msg(t1),
            t2=rosmsg.time_msg(t2),
            t3=rosmsg.time_msg(t3),
            t4=rosmsg.time_msg(t4),
            offset_s=offset,
            delay_s=delay,
        )
        writer.write(CLOCK_OFFSET_TOPIC, rosmsg.CLOCK_OFFSET_SAMPLE, t4, msg)
    return truth, lost


def _probes(spec: SynthSpec, rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """Robot-initiated probes (t1, t2, t3, t4): t1/t4 robot clock, t2/t3 host clock."""
    plan = spec.plan
    end_s = plan.total_s + spec.mocap_tail_s
    out = []
    for i, host_s in enumerate(np.arange(-spec.mocap_lead_s, end_s, spec.probe_interval_s)):
        h1 = spec.stream_start_ns + int(round(host_s * 1e9))
        clean = i % 5 == 0
        forward = spec.probe_min_delay_s + (0.0 if clean else rng.uniform(0, spec.probe_extra_delay_s))
        back = spec.probe_min_delay_s + (0.0 if clean else rng.uniform(0, spec.probe_extra_delay_s))
        t1 = h1 - int(round(float(_offset_at(spec, h1)) * 1e9))
        t2 = h1 + int(round(forward * 1e9))
        t3 = t2 + 50_000
        h4 = t3 + int(round(back * 1e9))
        t4 = h4 - int(round(float(_offset_at(spec, h4)) * 1e9))
        out.append((t1, t2, t3, t4))
    return out


def _write_mocap(
    bag_dir: Path,
    spec: SynthSpec,
    rng: np.random.Generator,
    pose_writer: BagWriter | None,
    arrivals: list | None = None,
) -> None:
    plan = spec.plan
    start_s = -spec.mocap_lead_s + spec.mocap_phase_s
    n = int((plan.total_s + spec.mocap_lead_s + spec.mocap_tail_s) * spec.mocap_rate_hz)
    k = np.arange(n)
    t_s = start_s + k / spec.mocap_rate_hz
    xyz, yaw = true_pose(spec, t_s) if arrivals is None else model_pose(spec, arrivals, t_s)
    if spec.mocap_noise_m:
        xyz = xyz + rng.normal(0.0, spec.mocap_noise_m, xyz.shape)
    lost = _in_spans(t_s, spec.lost_frames)
    invalid = _in_spans(t_s, spec.invalid_frames)
    body_yaw = yaw - math.radians(spec.body_yaw_offset_deg)
    half = body_yaw / 2.0
    quat = np.column_stack([np.zeros(n), np.zeros(n), np.sin(half), np.cos(half)])
    if spec.mocap_up_axis == "y":
        xyz, quat = _z_up_to_y_up(xyz, quat)
    numbers = _frame_numbers(spec, t_s)
    arrival_s = t_s + spec.mocap_delay_s
    if spec.mocap_delay_jitter_s:  # its own generator: the other draws stay as they were
        arrival_s = arrival_s + np.random.default_rng(spec.seed + 1).uniform(
            0.0, spec.mocap_delay_jitter_s, n
        )
    capture_s = spec.mocap_clock_offset_s + (k / spec.mocap_rate_hz) * (
        1.0 + spec.mocap_clock_drift_ppm * 1e-6
    )
    frame = rosmsg.msg_class(rosmsg.MOCAP_FRAME)
    with BagWriter(bag_dir) as writer:
        for i in range(n):
            if lost[i]:
                continue
            t_ns = spec.stream_start_ns + int(round(arrival_s[i] * 1e9))
            if not invalid[i]:
                if pose_writer is None:
                    pose = rosmsg.pose_stamped(t_ns, "mocap", xyz[i], quat[i])
                    writer.write(spec.pose_topic, rosmsg.POSE_STAMPED, t_ns, pose)
                else:  # the robot stamps with its own clock
                    robot_ns = t_ns - int(round(float(_offset_at(spec, t_ns)) * 1e9))
                    pose = rosmsg.pose_stamped(robot_ns, "odom", xyz[i], quat[i])
                    pose_writer.write(spec.pose_topic, rosmsg.POSE_STAMPED, robot_ns, pose)
            if spec.write_frames:
                msg = frame(
                    header=rosmsg.header(t_ns, "mocap"),
                    frame_number=int(numbers[i]),
                    rigid_body_id=1,
                    tracking_valid=not invalid[i],
                    mean_error_m=0.0002,
                    mocap_timestamp_s=float(capture_s[i]),
                )
                writer.write(MOCAP_FRAMES_TOPIC, rosmsg.MOCAP_FRAME, t_ns, msg)


def _frame_numbers(spec: SynthSpec, t_s: np.ndarray) -> np.ndarray:
    numbers = 1000 + np.arange(len(t_s), dtype=np.int64)
    for start_s, first in spec.renumber_frames:
        later = np.flatnonzero(t_s >= start_s)
        if len(later):
            numbers[later] += first - numbers[later[0]]
    for at_s in spec.garbage_frame_numbers:
        numbers[np.argmin(np.abs(t_s - at_s))] = 2_147_480_000
    return numbers


def _z_up_to_y_up(xyz: np.ndarray, quat_xyzw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of the analysis' Y-up -> Z-up turn: -90 deg about x."""
    s = math.sqrt(0.5)
    rot, inv = np.array([-s, 0.0, 0.0, s]), np.array([s, 0.0, 0.0, s])
    out = np.column_stack([xyz[:, 0], xyz[:, 2], -xyz[:, 1]])
    return out, _qmul(
        _qmul(np.broadcast_to(rot, quat_xyzw.shape), quat_xyzw), np.broadcast_to(inv, quat_xyzw.shape)
    )


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a.T
    bx, by, bz, bw = b.T
    return np.column_stack(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def _write_record(trial_dir: Path, spec: SynthSpec) -> None:
    end_reason = spec.end_reason or ("completed" if spec.stop_after_s is None else "host-stopped")
    outcome = TrialOutcome(
        end_reason=end_reason,
        end_detail="" if end_reason == "completed" else "synthetic early stop",
        stream_start_ns=spec.stream_start_ns,
        clock_offset_s=spec.clock_offset_s,
        clock_round_trip_s=2 * spec.probe_min_delay_s,
        software={"fieldtest": "synth"},
        warnings=[],
        cpu=spec.cpu,
        link=spec.link,
        faults=spec.faults,
    )
    request = TrialRequest(
        name=spec.name,
        plan=spec.plan,
        transport=TransportConfig(middleware=spec.middleware, security=spec.security, qos=spec.qos),
        network=spec.network,
        repetition=spec.repetition,
        seed=spec.seed,
        twin=TwinSettings(**spec.base_errors),
    )
    write_trial(trial_dir, TrialRecord(trial_id=f"synth-{spec.name}", request=request, outcome=outcome))


def cut_bag(bag_dir: Path, fraction: float) -> None:
    """Leave the bag as a killed writer would: the MCAP file cut short, no metadata.yaml."""
    (bag_dir / "metadata.yaml").unlink(missing_ok=True)
    for path in bag_dir.glob("*.mcap"):
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * fraction)])
