"""Load a trial directory into numpy arrays: commands, receipts, clock probes, ground truth, frames.

Nothing here interprets the data; problems become entries in ``TrialData.problems`` (a missing or
damaged bag) so the analysis can still report what the other bags allow, flagged as partial.
Only an unusable trial.yaml raises (TrialFormatError, one line naming the file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fieldtest import rosmsg
from fieldtest.analysis.loading import fastbag
from fieldtest.analysis.loading.mocaptime import CAPTURE, MocapTime, retime_poses
from fieldtest.analysis.loading.mocaptracks import Frames, Poses
from fieldtest.errors import FieldtestError
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
    BagError,
    TrialFormatError,
    TrialRecord,
    read_trial,
)

BAG_NAMES = (HOST_BAG, ROBOT_BAG, MOCAP_BAG)


class AnalysisError(FieldtestError, ValueError):
    """A trial that cannot be analyzed at all; the message names the file and the problem."""


@dataclass
class BagStatus:
    name: str
    path: str
    present: bool = False
    truncated: bool = False
    problem: str = ""
    topics: dict[str, int] = field(default_factory=dict)  # topic -> messages read


@dataclass
class Commands:
    """Commands as the host sent them (host clock), in send order."""

    seq: np.ndarray
    sent_ns: np.ndarray
    linear: np.ndarray
    angular: np.ndarray


@dataclass
class Receipts:
    """Commands as the robot received them, in arrival order; ``received_ns`` on the robot clock,
    ``taken_ns`` when its receiver took each (the bag's log time; older bags logged the arrival)."""

    seq: np.ndarray
    sent_ns: np.ndarray
    received_ns: np.ndarray
    taken_ns: np.ndarray
    live_offset_s: np.ndarray
    live_latency_s: np.ndarray
    linear: np.ndarray
    angular: np.ndarray


@dataclass
class Probes:
    """Completed robot-initiated clock probes: t1/t4 robot clock, t2/t3 host clock."""

    t1_ns: np.ndarray
    t2_ns: np.ndarray
    t3_ns: np.ndarray
    t4_ns: np.ndarray

    @property
    def offset_s(self) -> np.ndarray:
        """host - robot: ((t2 - t1) + (t3 - t4)) / 2, from the integer stamps."""
        offset: np.ndarray = ((self.t2_ns - self.t1_ns) + (self.t3_ns - self.t4_ns)).astype(float) / 2e9
        return offset

    @property
    def delay_s(self) -> np.ndarray:
        delay: np.ndarray = ((self.t4_ns - self.t1_ns) - (self.t3_ns - self.t2_ns)).astype(float) / 1e9
        return delay


@dataclass
class TrialData:
    trial_dir: Path
    record: TrialRecord
    plan: SquarePlan
    stream_start_ns: int
    commands: Commands | None
    receipts: Receipts | None
    probes: Probes | None
    poses: Poses | None
    frames: Frames | None
    bags: dict[str, BagStatus]
    problems: list[str] = field(default_factory=list)  # reasons the result is partial
    warnings: list[str] = field(default_factory=list)
    mocap_time: MocapTime | None = None  # metrics.json mocap.time (None: no poses)


def load_trial(
    trial_dir: str | Path,
    pose_topic: str = MOCAP_POSE_TOPIC,
    pose_bag: str | Path | None = None,
    up_axis: str = "z",
    pose_time: str = "header",
    mocap_time: str = CAPTURE,
) -> TrialData:
    trial_dir = Path(trial_dir)
    if not trial_dir.is_dir():
        raise AnalysisError(f"{trial_dir}: no such trial directory")
    record = read_trial(trial_dir)
    plan = record.request.plan
    problems: list[str] = []
    warnings: list[str] = []
    wanted = {
        HOST_BAG: {CMD_VEL_TOPIC, pose_topic},
        ROBOT_BAG: {RECEIPTS_TOPIC, CLOCK_OFFSET_TOPIC, pose_topic},
        MOCAP_BAG: {pose_topic, MOCAP_FRAMES_TOPIC},
    }
    raws: dict[str, fastbag.RawBag | None] = {}
    bags: dict[str, BagStatus] = {}
    for name in BAG_NAMES:
        raws[name], bags[name] = _open_bag(trial_dir / name, name, wanted[name], problems, warnings)
    if all(raw is None for raw in raws.values()) and pose_bag is None:
        raise AnalysisError(f"{trial_dir}: no readable bag (host/, robot/, mocap/)")

    commands = _commands(raws[HOST_BAG], problems)
    receipts, probes = _robot_side(raws[ROBOT_BAG], problems)
    stream_start_ns = _stream_start(record, commands, trial_dir)
    poses, frames = _ground_truth(raws, pose_topic, pose_bag, up_axis, pose_time, bags, problems, warnings)
    poses, mocap_time_section = retime_poses(poses, frames, mocap_time)
    return TrialData(
        trial_dir=trial_dir,
        record=record,
        plan=plan,
        stream_start_ns=stream_start_ns,
        commands=commands,
        receipts=receipts,
        probes=probes,
        poses=poses,
        frames=frames,
        bags=bags,
        problems=problems,
        warnings=warnings,
        mocap_time=mocap_time_section,
    )


def _open_bag(
    path: Path, name: str, topics: set[str], problems: list[str], warnings: list[str]
) -> tuple[fastbag.RawBag | None, BagStatus]:
    status = BagStatus(name=name, path=str(path))
    if not path.exists():
        problems.append(f"{path}: missing")
        return None, status
    try:
        raw = fastbag.read_raw(path, topics)
    except BagError as exc:
        status.problem = str(exc)
        problems.append(str(exc))
        return None, status
    status.present = True
    status.truncated, status.problem = raw.truncated, raw.problem
    status.topics = {topic: raw.count(topic) for topic in sorted(raw.raw)}
    if raw.truncated:
        warnings.append(f"{raw.path}: cut off ({raw.problem}); read up to the cut")
    return raw, status


def _commands(raw: fastbag.RawBag | None, problems: list[str]) -> Commands | None:
    if raw is None:
        return None
    got = fastbag.topic_arrays(raw, CMD_VEL_TOPIC, frame_ids=True)
    if got is None or len(got[0]) == 0:
        problems.append(f"{raw.path}: no {CMD_VEL_TOPIC} messages")
        return None
    log_ns, f = got
    seq = np.array([_seq_or(frame_id, -1) for frame_id in f["frame_id"]], dtype=np.int64)
    sent = fastbag.stamp_ns(f["sec"], f["nanosec"])
    sent = np.where(sent > 0, sent, log_ns)
    return Commands(seq=seq, sent_ns=sent, linear=f["lx"], angular=f["az"])


def _seq_or(frame_id: str, default: int) -> int:
    seq = rosmsg.seq_of(frame_id)
    return default if seq is None else seq


def _robot_side(raw: fastbag.RawBag | None, problems: list[str]) -> tuple[Receipts | None, Probes | None]:
    if raw is None:
        return None, None
    receipts = probes = None
    got = fastbag.topic_arrays(raw, RECEIPTS_TOPIC)
    if got is None or len(got[0]) == 0:
        problems.append(f"{raw.path}: no {RECEIPTS_TOPIC} messages (the robot logged no command)")
    else:
        log_ns, f = got
        receipts = Receipts(
            seq=f["seq"].astype(np.int64),
            sent_ns=fastbag.stamp_ns(f["sent_sec"], f["sent_nanosec"]),
            received_ns=fastbag.stamp_ns(f["received_sec"], f["received_nanosec"]),
            taken_ns=log_ns,
            live_offset_s=f["clock_offset_s"],
            live_latency_s=f["latency_s"],
            linear=f["lx"],
            angular=f["az"],
        )
    got = fastbag.topic_arrays(raw, CLOCK_OFFSET_TOPIC)
    if got is not None and len(got[0]):
        _, f = got
        probes = Probes(
            *(fastbag.stamp_ns(f[f"{t}_sec"], f[f"{t}_nanosec"]) for t in ("t1", "t2", "t3", "t4"))
        )
    return receipts, probes


def _stream_start(record: TrialRecord, commands: Commands | None, trial_dir: Path) -> int:
    """outcome.stream_start_ns, or derived from the first numbered command (tick n at n / rate)."""
    if record.outcome.stream_start_ns is not None:
        return int(record.outcome.stream_start_ns)
    if commands is not None and np.any(commands.seq >= 0):
        i = int(np.flatnonzero(commands.seq >= 0)[0])
        tick_ns = 1e9 / record.request.plan.command_rate_hz
        return int(commands.sent_ns[i] - commands.seq[i] * tick_ns)
    raise AnalysisError(
        f"{trial_dir / 'trial.yaml'}: outcome.stream_start_ns is missing and no numbered command to derive it"
    )


def _ground_truth(
    raws: dict[str, fastbag.RawBag | None],
    pose_topic: str,
    pose_bag: str | Path | None,
    up_axis: str,
    pose_time: str,
    bags: dict[str, BagStatus],
    problems: list[str],
    warnings: list[str],
) -> tuple[Poses | None, Frames | None]:
    """Poses from ``pose_bag`` if given, else from the first of mocap/robot/host that has the topic."""
    sources: list[tuple[str, fastbag.RawBag | None]]
    if pose_bag is not None:
        try:
            extra = fastbag.read_raw(pose_bag, {pose_topic})
        except BagError as exc:
            raise AnalysisError(str(exc)) from None
        sources = [(str(pose_bag), extra)]
    else:
        sources = [(name, raws[name]) for name in (MOCAP_BAG, ROBOT_BAG, HOST_BAG)]
    for name, raw in sources:
        if raw is None or raw.count(pose_topic) == 0:
            continue
        poses = _poses(raw, name, pose_topic, up_axis, pose_time, warnings)
        frames = None
        if name == MOCAP_BAG and raw.count(MOCAP_FRAMES_TOPIC):
            frames = _frames(raw)
        return poses, frames
    where = pose_bag if pose_bag is not None else "the mocap, robot or host bag"
    problems.append(f"no ground truth: topic {pose_topic} not found in {where}")
    return None, None


def _arrays(raw: fastbag.RawBag, topic: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A topic the caller found counted in the bag."""
    got = fastbag.topic_arrays(raw, topic)
    if got is None:
        raise BagError(f"{raw.path}: no {topic} messages")
    return got


def _poses(
    raw: fastbag.RawBag, bag: str, topic: str, up_axis: str, pose_time: str, warnings: list[str]
) -> Poses:
    log_ns, f = _arrays(raw, topic)
    t = fastbag.stamp_ns(f["sec"], f["nanosec"]) if pose_time == "header" else log_ns
    if pose_time == "header" and np.any(t <= 0):
        warnings.append(f"{raw.path}: {topic} has unset header stamps; using the bag's log times")
        t = log_ns
    xyz = np.column_stack([f["px"], f["py"], f["pz"]])
    quat = np.column_stack([f["qx"], f["qy"], f["qz"], f["qw"]])
    norm = np.linalg.norm(quat, axis=1)
    ok = np.isfinite(xyz).all(axis=1) & np.isfinite(quat).all(axis=1) & (norm > 0.5)
    order = np.argsort(t[ok], kind="stable")
    t, xyz, quat = t[ok][order], xyz[ok][order], quat[ok][order] / norm[ok][order, None]
    keep = np.concatenate([[True], np.diff(t) > 0])  # a repeated stamp adds nothing
    xyz, quat = to_z_up(xyz[keep], quat[keep], up_axis)
    clock = "robot" if bag == ROBOT_BAG else "host"
    return Poses(t[keep], xyz, quat, topic, bag, clock, dropped_invalid=int(np.count_nonzero(~ok)))


def _frames(raw: fastbag.RawBag) -> Frames:
    log_ns, f = _arrays(raw, MOCAP_FRAMES_TOPIC)
    t = fastbag.stamp_ns(f["sec"], f["nanosec"])
    t = np.where(t > 0, t, log_ns)
    return Frames(
        t_ns=t,
        frame_number=f["frame_number"].astype(np.int64),
        valid=f["tracking_valid"] != 0,
        capture_s=f["mocap_timestamp_s"].astype(float),
    )


def to_z_up(xyz: np.ndarray, quat_xyzw: np.ndarray, up_axis: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions and orientations in a Z-up frame; a Y-up frame (Motive's default) is turned +90 deg about x."""
    if up_axis == "z":
        return xyz, quat_xyzw
    if up_axis != "y":
        raise AnalysisError(f"up axis must be 'z' or 'y', got {up_axis!r}")
    xyz = np.column_stack([xyz[:, 0], -xyz[:, 2], xyz[:, 1]])
    s = np.sqrt(0.5)
    rot = np.array([s, 0.0, 0.0, s])  # +90 deg about x, (x, y, z, w)
    return xyz, quat_multiply(quat_multiply(np.broadcast_to(rot, quat_xyzw.shape), quat_xyzw), _conj(rot))


def _conj(q: np.ndarray) -> np.ndarray:
    conjugate: np.ndarray = q * np.array([-1.0, -1.0, -1.0, 1.0])
    return conjugate


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (x, y, z, w) quaternions, row by row."""
    ax, ay, az, aw = np.moveaxis(np.atleast_2d(a), -1, 0)
    bx, by, bz, bw = np.moveaxis(np.atleast_2d(b), -1, 0)
    return np.column_stack(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ]
    )


def quat_yaw(quat_xyzw: np.ndarray) -> np.ndarray:
    """Yaw about +z of (x, y, z, w) quaternions (radians, wrapped)."""
    x, y, z, w = quat_xyzw.T
    yaw: np.ndarray = np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return yaw


__all__ = [
    "AnalysisError",
    "BagStatus",
    "Commands",
    "Frames",
    "Poses",
    "Probes",
    "Receipts",
    "TrialData",
    "TrialFormatError",
    "load_trial",
    "quat_multiply",
    "quat_yaw",
    "to_z_up",
]
