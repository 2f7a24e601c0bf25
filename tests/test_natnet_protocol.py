"""NatNet wire format: round trips, the third-party `natnet` parser on our bytes, axes, pose feed."""

from __future__ import annotations

import math
import struct
import time

import numpy as np
import pytest
from natnet import DataDescriptions, DataFrame, ServerInfo, Version
from natnet.packet_buffer import PacketBuffer

from fieldtest.names import NATNET_DATA_PORT
from fieldtest.natnet import protocol as nn
from fieldtest.natnet.axes import stream_to_world, world_to_stream
from fieldtest.natnet.feed import PoseFeedReceiver, PoseFeedSender, pack_sample, unpack_sample

VERSIONS = [nn.NATNET_3_1, nn.NATNET_4_1]


def f32(value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0]


def sample_frame() -> nn.Frame:
    return nn.Frame(
        frame_number=123456,
        rigid_bodies=[
            nn.RigidBody(1, (1.25, 0.5, -2.0), (0.0, 0.3826834, 0.0, 0.9238795), 0.00021, 1),
            nn.RigidBody(7, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0), 0.0, 0),
        ],
        marker_sets=[("turtlebot4", [(0.1, 0.2, 0.3), (0.4, 0.5, 0.6)]), ("all", [(1.0, 2.0, 3.0)])],
        other_markers=[(9.0, 8.0, 7.0)],
        timecode=11,
        timecode_subframe=2,
        timestamp=1234.5678901234,
        stamp_camera_mid_exposure=10_000_000_001,
        stamp_data_received=10_000_500_002,
        stamp_transmit=10_001_000_003,
        precision_timestamp_s=1_700_000_000,
        precision_timestamp_frac=123,
        params=0x02,
    )


def payload(message: bytes) -> memoryview:
    return nn.unpack_message(message)[1]


@pytest.mark.parametrize("version", VERSIONS, ids=nn.version_text)
def test_frame_round_trip(version):
    frame = sample_frame()
    packet = nn.pack_frame(frame, version)
    message_id, body = nn.unpack_message(packet)
    assert message_id == nn.NAT_FRAMEOFDATA and len(body) == len(packet) - 4
    back = nn.unpack_frame(body, version)
    assert back.frame_number == 123456
    assert [rb.id for rb in back.rigid_bodies] == [1, 7]
    first = back.rigid_bodies[0]
    assert first.position == tuple(f32(v) for v in (1.25, 0.5, -2.0))
    assert first.orientation == tuple(f32(v) for v in (0.0, 0.3826834, 0.0, 0.9238795))
    assert first.mean_error == f32(0.00021)
    assert first.tracking_valid and not back.rigid_bodies[1].tracking_valid
    assert back.marker_sets[0][0] == "turtlebot4" and len(back.marker_sets[0][1]) == 2
    assert back.other_markers == [(9.0, 8.0, 7.0)]
    assert (back.timecode, back.timecode_subframe, back.timestamp) == (11, 2, 1234.5678901234)
    assert back.stamp_transmit == 10_001_000_003 and back.stamp_camera_mid_exposure == 10_000_000_001
    assert back.params == 0x02
    if version >= (4, 1):
        assert (back.precision_timestamp_s, back.precision_timestamp_frac) == (1_700_000_000, 123)
    else:
        assert back.precision_timestamp_s == 0  # not on the wire before 4.1


def test_natnet_41_carries_section_sizes():
    frame = sample_frame()
    v3, v4 = nn.pack_frame(frame, nn.NATNET_3_1), nn.pack_frame(frame, nn.NATNET_4_1)
    # 4.1 adds 4 size fields x 8 sections (incl. the new asset section's count) and the precision stamp.
    assert len(v4) - len(v3) == 7 * 4 + 8 + 8
    # The rigid-body section of 4.1 says 2 x 38 bytes.
    body = payload(v4)
    offset = body.tobytes().index(struct.pack("<ii", 2, 2 * 38))
    assert offset > 0


def test_corrupt_section_size_is_reported():
    body = bytearray(payload(nn.pack_frame(sample_frame(), nn.NATNET_4_1)))
    at = body.index(struct.pack("<ii", 2, 76))
    body[at + 4 : at + 8] = struct.pack("<i", 70)
    with pytest.raises(nn.NatNetProtocolError, match="rigid body section .* says 70 bytes, holds 76"):
        nn.unpack_frame(bytes(body), nn.NATNET_4_1)


def test_truncated_and_mislabelled_packets_are_reported():
    packet = nn.pack_frame(sample_frame(), nn.NATNET_3_1)
    with pytest.raises(nn.NatNetProtocolError, match="header says"):
        nn.unpack_message(packet[:-10])
    with pytest.raises(nn.NatNetProtocolError, match="truncated at byte"):
        nn.unpack_frame(payload(packet)[:60], nn.NATNET_3_1)
    with pytest.raises(nn.NatNetProtocolError, match="shorter than the NatNet header"):
        nn.unpack_message(b"\x07")
    with pytest.raises(nn.NatNetProtocolError, match="not supported"):
        nn.unpack_frame(payload(packet), (2, 9, 0, 0))


def _motive_like_frame(version) -> bytes:
    """A frame as a live Motive sends it: with a skeleton, labeled markers and a force plate."""
    sized = version >= (4, 1)

    def section(count: int, content: bytes) -> bytes:
        return struct.pack("<i", count) + (struct.pack("<i", len(content)) if sized else b"") + content

    bone = struct.pack("<i3f4ffH", 65537, 0, 1, 0, 0, 0, 0, 1, 0.0, 1)
    out = struct.pack("<I", 42) + section(0, b"") + section(0, b"")  # no marker sets, no other markers
    out += section(1, struct.pack("<i3f4ffH", 3, 1, 2, 3, 0, 0, 0, 1, 0.001, 1))
    out += section(1, struct.pack("<ii", 1, 2) + bone + bone)  # one skeleton, two bones
    if sized:
        out += section(
            1, struct.pack("<ii", 9, 1) + bone[:-4] + struct.pack("<fH", 0.0, 1) + struct.pack("<i", 0)
        )
    out += section(2, struct.pack("<i3ffHf", 5, 1, 1, 1, 0.014, 0, 0.0002) * 2)
    out += section(1, struct.pack("<ii", 1, 2) + struct.pack("<i3f", 3, 1, 2, 3) + struct.pack("<i", 0))
    out += section(0, b"")  # devices
    out += struct.pack("<IId", 0, 0, 0.35) + struct.pack("<3Q", 1, 2, 3)
    if sized:
        out += struct.pack("<II", 0, 0)
    return out + struct.pack("<H", 1) + b"\0" * 4


@pytest.mark.parametrize("version", VERSIONS, ids=nn.version_text)
def test_frame_with_sections_we_do_not_send_is_read(version):
    frame = nn.unpack_frame(_motive_like_frame(version), version)
    assert frame.frame_number == 42
    assert frame.rigid_body(3).position == (1.0, 2.0, 3.0)
    assert (frame.skeleton_count, frame.labeled_marker_count, frame.force_plate_count) == (1, 2, 1)
    assert frame.asset_count == (1 if version >= (4, 1) else 0)
    assert frame.timestamp == 0.35 and frame.params == 1


def test_asset_section_of_41_is_skipped_by_its_size():
    body = bytearray(payload(nn.pack_frame(sample_frame(), nn.NATNET_4_1)))
    skeletons_end = body.index(struct.pack("<ii", 2, 76)) + 8 + 76 + 8  # rigid bodies, empty skeletons
    asset = struct.pack("<ii", 99, 0) + struct.pack("<i", 0)  # id, no rigid bodies, no markers
    body[skeletons_end : skeletons_end + 8] = struct.pack("<ii", 1, len(asset)) + asset
    frame = nn.unpack_frame(bytes(body), nn.NATNET_4_1)
    assert frame.asset_count == 1 and frame.rigid_body(1) is not None and frame.params == 0x02


@pytest.mark.parametrize("version", [nn.NATNET_3_1, nn.NATNET_4_1, (4, 2, 0, 0)], ids=nn.version_text)
def test_modeldef_round_trip(version):
    body = nn.RigidBodyDescription(
        name="robot",
        id=5,
        parent_id=-1,
        offset=(0.0, 0.1, 0.0),
        orientation=(0.0, 0.0, 0.7071068, 0.7071068),
        marker_offsets=[(0.1, 0.0, 0.0), (0.0, 0.1, 0.0), (0.0, 0.0, 0.1)],
        marker_labels=[0, 0, 3],
        marker_names=["a", "b", "c"],
    )
    message_id, data = nn.unpack_message(nn.pack_modeldef([body], version))
    assert message_id == nn.NAT_MODELDEF
    models = nn.unpack_modeldef(data, version)
    back = models.rigid_body(5)
    assert back is not None and back.name == "robot" and back.parent_id == -1
    assert back.marker_labels == [0, 0, 3] and len(back.marker_offsets) == 3
    assert back.marker_names == (["a", "b", "c"] if version[0] >= 4 else [])
    expected_quat = (0.0, 0.0, f32(0.7071068), f32(0.7071068)) if version >= (4, 2) else (0.0, 0.0, 0.0, 1.0)
    assert back.orientation == expected_quat
    assert models.marker_sets == {"robot": ["a", "b", "c"]}


def test_server_info_round_trip():
    info = nn.ServerInfo(
        "Motive", (3, 1, 2, 0), nn.NATNET_4_1, 10_000_000, NATNET_DATA_PORT, False, "239.255.42.99"
    )
    message_id, data = nn.unpack_message(nn.pack_server_info(info))
    assert message_id == nn.NAT_SERVERINFO and len(data) == 256 + 4 + 4 + 8 + 2 + 1 + 4
    assert nn.unpack_server_info(data) == info
    # Without the connection block (NatNet 2.x servers) the rest still reads.
    legacy = nn.unpack_server_info(bytes(data)[:264])
    assert legacy.natnet_version == nn.NATNET_4_1 and legacy.data_port is None


def test_parse_version():
    assert nn.parse_version("4.1") == (4, 1, 0, 0)
    assert nn.parse_version([3, 1, 0, 0]) == (3, 1, 0, 0)
    for bad in ("four", "4.1.0.0.0", "4.300"):
        with pytest.raises(nn.NatNetProtocolError, match="NatNet version"):
            nn.parse_version(bad)


# --- the third-party parser (PyPI `natnet`) reads what we pack --------------------------------------


@pytest.mark.parametrize("version", VERSIONS, ids=nn.version_text)
def test_pypi_natnet_parses_our_frames(version):
    frame = sample_frame()
    buffer = PacketBuffer(nn.pack_frame(frame, version))
    assert buffer.read_uint16() == nn.NAT_FRAMEOFDATA
    buffer.read_uint16()
    parsed = DataFrame.read_from_buffer(buffer, Version(*version))
    assert parsed.prefix.frame_number == 123456
    bodies = {rb.id_num: rb for rb in parsed.rigid_bodies}
    assert bodies[1].pos == pytest.approx((1.25, 0.5, -2.0))
    assert bodies[1].rot == pytest.approx((0.0, 0.3826834, 0.0, 0.9238795), abs=1e-7)
    assert bodies[1].tracking_valid and not bodies[7].tracking_valid
    assert parsed.unlabeled_marker_pos == ((9.0, 8.0, 7.0),)
    assert parsed.suffix.timestamp == 1234.5678901234
    assert parsed.suffix.stamp_transmit == 10_001_000_003
    if version < (4, 1):  # natnet 0.3 does not read 4.1's precision timestamp, so only 3.x params line up
        assert parsed.suffix.param == 0x02


@pytest.mark.parametrize("version", VERSIONS, ids=nn.version_text)
def test_pypi_natnet_parses_our_modeldef_and_server_info(version):
    body = nn.RigidBodyDescription("robot", 5, marker_offsets=[(0.1, 0.0, 0.0)], marker_names=["m1"])
    buffer = PacketBuffer(nn.pack_modeldef([body], version))
    buffer.pointer = 4
    parsed = DataDescriptions.read_from_buffer(buffer, Version(*version))
    assert parsed.rigid_bodies[0].name == "robot" and parsed.rigid_bodies[0].id_num == 5
    assert parsed.marker_sets[0].name == "robot"
    assert buffer.pointer == len(buffer.data)
    buffer = PacketBuffer(nn.pack_server_info(nn.ServerInfo(natnet_version=version)))
    buffer.pointer = 4
    info = ServerInfo.read_from_buffer(buffer, None)
    assert info.application_name == "Motive" and info.nat_net_protocol_version == Version(*version)


# --- axes --------------------------------------------------------------------------------------------


def _rotate(q, v):
    x, y, z, w = q
    u = np.array([x, y, z])
    v = np.asarray(v, dtype=float)
    return v + 2.0 * np.cross(u, np.cross(u, v) + w * v)


def test_y_up_mapping_of_positions():
    # World up (z) is Motive's Y; world forward (x) stays X; world left (y) is Motive -Z.
    assert world_to_stream((0, 0, 1), (0, 0, 0, 1), "y")[0] == (0, 1, 0)
    assert world_to_stream((1, 0, 0), (0, 0, 0, 1), "y")[0] == (1, 0, 0)
    assert world_to_stream((0, 1, 0), (0, 0, 0, 1), "y")[0] == (0, 0, -1)
    assert world_to_stream((1, 2, 3), (0.1, 0.2, 0.3, 0.9), "z") == ((1, 2, 3), (0.1, 0.2, 0.3, 0.9))


@pytest.mark.parametrize("up_axis", ["y", "z"])
def test_axes_round_trip_and_rotation_consistency(up_axis):
    rng = np.random.default_rng(3)
    for _ in range(20):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        p = tuple(rng.normal(size=3))
        sp, sq = world_to_stream(p, tuple(q), up_axis)
        bp, bq = stream_to_world(sp, sq, up_axis)
        assert bp == pytest.approx(p) and bq == pytest.approx(tuple(q))
        # Rotating a vector in the world then mapping it equals mapping it then rotating in the stream.
        v = rng.normal(size=3)
        mapped_after = world_to_stream(tuple(_rotate(q, v)), (0, 0, 0, 1), up_axis)[0]
        rotated_in_stream = _rotate(sq, world_to_stream(tuple(v), (0, 0, 0, 1), up_axis)[0])
        assert rotated_in_stream == pytest.approx(mapped_after)


def test_yaw_becomes_rotation_about_motive_y():
    yaw = 0.7
    _, q = world_to_stream((0, 0, 0), (0, 0, math.sin(yaw / 2), math.cos(yaw / 2)), "y")
    assert q == pytest.approx((0, math.sin(yaw / 2), 0, math.cos(yaw / 2)))


def test_bad_up_axis_is_rejected():
    with pytest.raises(ValueError, match="up axis 'x'"):
        world_to_stream((0, 0, 0), (0, 0, 0, 1), "x")


# --- pose feed ---------------------------------------------------------------------------------------


def test_pose_feed_sample_round_trip():
    pose = (1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0)
    assert unpack_sample(pack_sample(5.0, pose)) == (5.0, pose)
    assert unpack_sample(pack_sample(6.0, None)) == (6.0, None)


def test_pose_feed_with_a_history_keeps_what_came_while_nobody_asked():
    """An emulator whose frames leave 10 s after their exposure asks for its first pose only then:
    the feed is read meanwhile, so the socket's buffer never overflows and every sample is kept.
    Each burst is half of what a loopback socket buffers (~256 samples); the next one waits until
    the feed has been read without anybody asking, so a busy machine slows the test, never fails it."""
    receiver = PoseFeedReceiver("127.0.0.1", 0, history_s=1000.0)
    try:
        with PoseFeedSender("127.0.0.1", receiver.port) as sender:
            for burst in range(50):  # 5000 samples: far more than a socket buffer holds
                for i in range(100):
                    n = burst * 100 + i
                    sender.send((float(n), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), t=100.0 + n / 100)
                read_by = time.monotonic() + 10.0
                while receiver.samples < (burst + 1) * 100 and time.monotonic() < read_by:
                    time.sleep(0.01)
                assert receiver.samples == (burst + 1) * 100, f"burst {burst} not read while nobody asked"
            assert receiver(100.0)[0] == pytest.approx(0.0)  # the first sample, asked for last
            assert receiver.samples == 5000
            assert receiver(124.995)[0] == pytest.approx(2499.5)
    finally:
        receiver.close()


def test_pose_feed_interpolates_holds_and_goes_stale():
    receiver = PoseFeedReceiver("127.0.0.1", 0, stale_s=0.25, max_extrapolate_s=0.05)
    try:
        with PoseFeedSender("127.0.0.1", receiver.port) as sender:
            assert receiver(100.0) is None  # nothing yet
            sender.send((0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), t=100.0)
            yaw = 0.2
            sender.send((1.0, 0.0, 0.0, 0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)), t=100.1)
            for _ in range(100):  # loopback delivery is immediate in practice; allow a moment
                if receiver.samples == 2:
                    break
                time.sleep(0.005)
                receiver(100.0)
            mid = receiver(100.05)
            assert mid[0] == pytest.approx(0.5)
            assert 2 * math.atan2(mid[5], mid[6]) == pytest.approx(yaw / 2, abs=1e-3)
            assert receiver(100.12)[0] == pytest.approx(1.2)  # small extrapolation
            assert receiver(100.3)[0] == pytest.approx(1.5)  # clamped at max_extrapolate_s
            assert receiver(100.4) is None  # stale
            sender.send(None, t=100.2)
            for _ in range(100):
                if receiver.samples == 3:
                    break
                time.sleep(0.005)
                receiver(100.2)
            assert receiver(100.2) is None  # occluded
    finally:
        receiver.close()


ALL_VERSIONS = [(3, 0, 0, 0), nn.NATNET_3_1, (4, 0, 0, 0), nn.NATNET_4_1, (4, 2, 0, 0)]


def _frame_with(bodies: int, markers: int) -> nn.Frame:
    return nn.Frame(
        frame_number=4242,
        rigid_bodies=[
            nn.RigidBody(i + 1, (0.5 * i, 0.25, -1.0), (0.0, 0.0, 0.0, 1.0)) for i in range(bodies)
        ],
        other_markers=[(0.1 * i, 0.2, 0.3) for i in range(markers)],
        timestamp=12.5,
    )


@pytest.mark.parametrize("written", ALL_VERSIONS, ids=nn.version_text)
@pytest.mark.parametrize("bodies", [0, 1, 2, 3])
@pytest.mark.parametrize("markers", [0, 1, 4])
def test_a_frame_read_as_another_layout_is_refused_never_read_without_its_bodies(written, bodies, markers):
    """A frame is read exactly or refused: e.g. a one-body NatNet 4.1 frame read as 3.x used to come out
    as a frame with no rigid body at timestamp 0 (recorded as "rigid body absent")."""
    sent = _frame_with(bodies, markers)
    body = payload(nn.pack_frame(sent, written))
    for read in ALL_VERSIONS:
        same_layout = nn.has_section_sizes(read) == nn.has_section_sizes(written)
        try:
            got = nn.unpack_frame(body, read)
        except nn.NatNetProtocolError as exc:
            assert not same_layout, exc
            continue
        assert same_layout, f"{nn.version_text(written)} read as {nn.version_text(read)}: {got}"
        assert [rb.id for rb in got.rigid_bodies] == [rb.id for rb in sent.rigid_bodies]
        assert got.timestamp == 12.5


@pytest.mark.parametrize("version", VERSIONS, ids=nn.version_text)
def test_bytes_left_over_after_a_frame_are_refused(version):
    body = bytes(payload(nn.pack_frame(sample_frame(), version)))
    nn.unpack_frame(body[:-4], version)  # without the end-of-data tag: accepted
    nn.unpack_frame(body[:-4] + b"\1\0\0\0", version)  # the tag's value is not checked (the SDK skips it)
    for extra in (b"\0", b"\0\0", b"\0\0\0\0\0"):
        with pytest.raises(nn.NatNetProtocolError, match="left over"):
            nn.unpack_frame(body + extra, version)
