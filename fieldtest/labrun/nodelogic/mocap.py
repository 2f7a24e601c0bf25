"""Ground truth from the ROS 2 mocap drivers, written as the kit's mocap bag (no ROS needed here).

The default path is the ROS-free NatNet recorder (``fieldtest.natnet``). When a lab already runs
a ROS 2 driver, the host's ``mocap_relay`` node feeds its messages through ``MocapRelay``, which
writes ``<trial>/mocap`` exactly as the recorder does: ``/mocap/pose`` (PoseStamped, world frame
Z up, stamp = the driver's stamp on the host clock) and ``/mocap/frames`` (MocapFrame for every
message, tracked or not), so ``fieldtest analyze`` needs no extra options.

Drivers and axes:
- mocap4r2_optitrack_driver: ``rigid_bodies`` (mocap4r2_msgs/RigidBodies), body picked by
  ``rigid_body_name`` (Motive's streaming id as text); no axis change: Motive's Up Axis applies.
- vrpn_mocap: ``/vrpn_mocap/<name>/pose`` (PoseStamped, best effort); Motive's axes as streamed.
- mocap_optitrack (ROS 2 port): ``<pose topic>`` (PoseStamped) already converted to Z up.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.natnet.axes import UpAxis, check_up_axis, stream_to_world
from fieldtest.record import MOCAP_BAG, MOCAP_FRAMES_TOPIC, MOCAP_POSE_TOPIC, BagWriter

MOCAP_FRAME_ID = "mocap"


def _finite(values: Iterable[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def select_body(bodies: Iterable[Any], name: str) -> Any | None:
    """The rigid body called ``name`` in a mocap4r2 RigidBodies message's ``rigidbodies``."""
    for body in bodies:
        if str(body.rigid_body_name) == name:
            return body
    return None


def pose_tuple(pose: Any) -> tuple[tuple[float, float, float], tuple[float, float, float, float]]:
    p, q = pose.position, pose.orientation
    return (float(p.x), float(p.y), float(p.z)), (float(q.x), float(q.y), float(q.z), float(q.w))


class MocapRelay:
    """Writes the kit's mocap bag from driver messages; thread-safe (callbacks come from rclpy)."""

    def __init__(self, trial_dir: str | Path, up_axis: UpAxis, rigid_body_id: int = 1):
        self.up_axis = check_up_axis(up_axis)
        self.rigid_body_id = rigid_body_id
        self.bag = BagWriter(Path(trial_dir) / MOCAP_BAG, background=True)
        self.frames = 0
        self.valid = 0
        self._lock = threading.Lock()
        self._closed = False

    def _write(self, stamp_ns: int, frame_number: int, pose: Any | None) -> bool:
        """One frame; ``pose`` None means the body was not tracked in it."""
        xyz = quat = None
        if pose is not None:
            xyz, quat = pose_tuple(pose)
            norm = math.sqrt(sum(c * c for c in quat))
            if not (_finite(xyz) and _finite(quat) and norm > 0.5):
                xyz = quat = None
        valid = xyz is not None
        with self._lock:
            if self._closed:
                return False
            self.frames += 1
            frame = rosmsg.msg_class(rosmsg.MOCAP_FRAME)(
                header=rosmsg.header(stamp_ns, MOCAP_FRAME_ID),
                frame_number=frame_number & 0xFFFFFFFF,
                rigid_body_id=self.rigid_body_id,
                tracking_valid=valid,
                mean_error_m=0.0,
                mocap_timestamp_s=stamp_ns / 1e9,
            )
            self.bag.write(MOCAP_FRAMES_TOPIC, rosmsg.MOCAP_FRAME, stamp_ns, frame)
            if xyz is not None and quat is not None:
                self.valid += 1
                world_xyz, world_quat = stream_to_world(xyz, quat, self.up_axis)
                pose_msg = rosmsg.pose_stamped(stamp_ns, MOCAP_FRAME_ID, world_xyz, world_quat)
                self.bag.write(MOCAP_POSE_TOPIC, rosmsg.POSE_STAMPED, stamp_ns, pose_msg)
        return valid

    def on_rigid_bodies(self, msg: Any, name: str) -> bool:
        """A mocap4r2_msgs/RigidBodies message (rclpy or rosbags object)."""
        body = select_body(msg.rigidbodies, name)
        return self._write(
            rosmsg.ns_of(msg.header.stamp), int(msg.frame_number), None if body is None else body.pose
        )

    def on_pose(self, msg: Any) -> bool:
        """A geometry_msgs/PoseStamped from vrpn_mocap or mocap_optitrack (frame number = count)."""
        return self._write(rosmsg.ns_of(msg.header.stamp), self.frames, msg.pose)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.bag.close()
