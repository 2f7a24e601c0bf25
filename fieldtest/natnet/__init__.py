"""OptiTrack NatNet for the field-test kit: wire format, Motive emulator (twin) and mocap recorder.

- ``protocol``: NatNet 3.x / 4.x packing and unpacking (server info, model definitions, frames).
- ``server.NatNetEmulator``: streams one rigid body like Motive, pose from a callable or the
  UDP pose feed (``feed``) the twin robot writes to.
- ``recorder.MocapRecorder``: ROS-free NatNet client writing /mocap/pose and /mocap/frames into
  a rosbag2 bag; works against a real Motive.
- ``python -m fieldtest.natnet serve | record | probe``.
"""

from fieldtest.natnet.axes import stream_to_world, world_to_stream
from fieldtest.natnet.feed import DEFAULT_FEED_PORT, PoseFeedReceiver, PoseFeedSender
from fieldtest.natnet.protocol import NATNET_3_1, NATNET_4_1, NatNetProtocolError, parse_version
from fieldtest.natnet.recorder import MocapRecorder, MocapRecorderError, RecorderConfig, RecorderStats
from fieldtest.natnet.server import EmulatorConfig, FrameRecord, NatNetEmulator

__all__ = [
    "DEFAULT_FEED_PORT",
    "NATNET_3_1",
    "NATNET_4_1",
    "EmulatorConfig",
    "FrameRecord",
    "MocapRecorder",
    "MocapRecorderError",
    "NatNetEmulator",
    "NatNetProtocolError",
    "PoseFeedReceiver",
    "PoseFeedSender",
    "RecorderConfig",
    "RecorderStats",
    "parse_version",
    "stream_to_world",
    "world_to_stream",
]
