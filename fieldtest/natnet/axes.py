"""Robot world frame <-> Motive streaming frame.

The robot world (ROS REP 103) is right-handed, Z up, x forward. Motive is right-handed and Y up
by default; its streaming setting "Up Axis" can switch the stream to Z up. Motive's Y-up frame is
its Z-up frame turned -90 degrees about x (OptiTrack's C3D export guidance maps Motive X -> X,
Y -> Z, Z -> -Y for Z-up tools), so

    Y-up stream (X, Y, Z)  ->  world (X, -Z, Y)        world (x, y, z)  ->  Y-up stream (x, z, -y)

The same proper rotation acts on a quaternion's vector part; w is unchanged. With Up Axis = Z the
stream is already in the world convention. Where the mocap origin and heading sit relative to the
robot's start is a matter of the Motive ground-plane calibration, not of this module: analysis
aligns trajectories.
"""

from __future__ import annotations

from typing import Literal

UpAxis = Literal["y", "z"]

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


def check_up_axis(up_axis: str) -> UpAxis:
    if up_axis == "y":
        return "y"
    if up_axis == "z":
        return "z"
    raise ValueError(f"up axis {up_axis!r}: expected 'y' (Motive default) or 'z'")


def world_to_stream(position: Vec3, orientation: Quat, up_axis: UpAxis) -> tuple[Vec3, Quat]:
    """Robot-world pose as Motive would stream it with the given Up Axis."""
    z_up = check_up_axis(up_axis) == "z"
    x, y, z = position
    qx, qy, qz, qw = orientation
    if z_up:
        return (x, y, z), (qx, qy, qz, qw)
    return (x, z, -y), (qx, qz, -qy, qw)


def stream_to_world(position: Vec3, orientation: Quat, up_axis: UpAxis) -> tuple[Vec3, Quat]:
    """Pose from a Motive stream with the given Up Axis, in the robot world (Z up)."""
    z_up = check_up_axis(up_axis) == "z"
    x, y, z = position
    qx, qy, qz, qw = orientation
    if z_up:
        return (x, y, z), (qx, qy, qz, qw)
    return (x, -z, y), (qx, -qz, qy, qw)
