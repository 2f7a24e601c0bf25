"""The analysis' fast bag reader must decode exactly what rosbags decodes, cut-off files included."""

import math

import numpy as np
import pytest
from rosbags.rosbag2 import Writer

from fieldtest import rosmsg
from fieldtest.analysis.loading import fastbag
from fieldtest.record import (
    CLOCK_OFFSET_TOPIC,
    CMD_VEL_TOPIC,
    MOCAP_FRAMES_TOPIC,
    MOCAP_POSE_TOPIC,
    RECEIPTS_TOPIC,
    BagWriter,
    read_bag,
)
from fieldtest.testkit.synth import cut_bag

N = 300
FRAME_IDS = ("mocap", "world", "a_longer_frame_name", "")  # different string lengths, different layouts


def _messages():
    rng = np.random.default_rng(3)
    frame = rosmsg.msg_class(rosmsg.MOCAP_FRAME)
    receipt = rosmsg.msg_class(rosmsg.COMMAND_RECEIPT)
    sample = rosmsg.msg_class(rosmsg.CLOCK_OFFSET_SAMPLE)
    for i in range(N):
        t = 1_700_000_000_000_000_000 + i * 8_333_333 + int(rng.integers(0, 1000))
        fid = FRAME_IDS[i % len(FRAME_IDS)]
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        yield MOCAP_POSE_TOPIC, rosmsg.POSE_STAMPED, t, rosmsg.pose_stamped(t, fid, rng.normal(size=3), q)
        yield (
            MOCAP_FRAMES_TOPIC,
            rosmsg.MOCAP_FRAME,
            t,
            frame(
                header=rosmsg.header(t, fid),
                frame_number=i * 3,
                rigid_body_id=-i,
                tracking_valid=bool(i % 3),
                mean_error_m=float(rng.random()),
                mocap_timestamp_s=i / 120.0,
            ),
        )
        yield CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, t, rosmsg.command(i * 7, t, rng.normal(), rng.normal())
        yield (
            RECEIPTS_TOPIC,
            rosmsg.COMMAND_RECEIPT,
            t,
            receipt(
                seq=2**40 + i,
                sent=rosmsg.time_msg(t - 5_000_000),
                received=rosmsg.time_msg(t),
                clock_offset_s=math.nan if i == 0 else float(rng.normal()),
                latency_s=float(rng.random()),
                twist=rosmsg.twist(rng.normal(), rng.normal()),
            ),
        )
        yield (
            CLOCK_OFFSET_TOPIC,
            rosmsg.CLOCK_OFFSET_SAMPLE,
            t,
            sample(
                id=i,
                t1=rosmsg.time_msg(t),
                t2=rosmsg.time_msg(t + 11),
                t3=rosmsg.time_msg(t + 22),
                t4=rosmsg.time_msg(t + 33),
                offset_s=float(rng.normal()),
                delay_s=float(rng.random()),
            ),
        )


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("bags") / "all"
    with BagWriter(path) as writer:
        for topic, typename, t, msg in _messages():
            writer.write(topic, typename, t, msg)
    return path


ALL = {MOCAP_POSE_TOPIC, MOCAP_FRAMES_TOPIC, CMD_VEL_TOPIC, RECEIPTS_TOPIC, CLOCK_OFFSET_TOPIC}


def _same(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.array_equal(a, b, equal_nan=True)


def test_every_decoder_matches_rosbags(bag):
    slow = read_bag(bag)
    fast = fastbag.read_raw(bag, ALL)
    assert not fast.truncated and fast.topics == slow.topics
    for topic in ALL:
        log_ns, f = fastbag.topic_arrays(fast, topic, frame_ids=True)
        msgs = slow.messages(topic)
        assert list(log_ns) == [t for t, _ in msgs]
        if topic == MOCAP_POSE_TOPIC:
            assert list(f["frame_id"]) == [m.header.frame_id for _, m in msgs]
            assert _same(
                fastbag.stamp_ns(f["sec"], f["nanosec"]), [rosmsg.ns_of(m.header.stamp) for _, m in msgs]
            )
            for ours, attr in (("px", "x"), ("py", "y"), ("pz", "z")):
                assert _same(f[ours], [getattr(m.pose.position, attr) for _, m in msgs])
            for ours, attr in (("qx", "x"), ("qy", "y"), ("qz", "z"), ("qw", "w")):
                assert _same(f[ours], [getattr(m.pose.orientation, attr) for _, m in msgs])
        elif topic == MOCAP_FRAMES_TOPIC:
            assert _same(f["frame_number"], [m.frame_number for _, m in msgs])
            assert _same(f["rigid_body_id"], [m.rigid_body_id for _, m in msgs])
            assert _same(f["tracking_valid"], [m.tracking_valid for _, m in msgs])
            assert _same(f["mean_error_m"], [np.float32(m.mean_error_m) for _, m in msgs])
            assert _same(f["mocap_timestamp_s"], [m.mocap_timestamp_s for _, m in msgs])
        elif topic == CMD_VEL_TOPIC:
            assert list(f["frame_id"]) == [m.header.frame_id for _, m in msgs]
            assert _same(f["lx"], [m.twist.linear.x for _, m in msgs])
            assert _same(f["az"], [m.twist.angular.z for _, m in msgs])
        elif topic == RECEIPTS_TOPIC:
            assert [int(s) for s in f["seq"]] == [m.seq for _, m in msgs]
            assert _same(
                fastbag.stamp_ns(f["sent_sec"], f["sent_nanosec"]), [rosmsg.ns_of(m.sent) for _, m in msgs]
            )
            assert _same(
                fastbag.stamp_ns(f["received_sec"], f["received_nanosec"]),
                [rosmsg.ns_of(m.received) for _, m in msgs],
            )
            assert _same(f["clock_offset_s"], [m.clock_offset_s for _, m in msgs])
            assert _same(f["latency_s"], [m.latency_s for _, m in msgs])
            assert _same(f["lx"], [m.twist.linear.x for _, m in msgs])
            assert _same(f["az"], [m.twist.angular.z for _, m in msgs])
        else:
            assert _same(f["id"], [m.id for _, m in msgs])
            for name in ("t1", "t2", "t3", "t4"):
                got = fastbag.stamp_ns(f[f"{name}_sec"], f[f"{name}_nanosec"])
                assert _same(got, [rosmsg.ns_of(getattr(m, name)) for _, m in msgs])
            assert _same(f["offset_s"], [m.offset_s for _, m in msgs])
            assert _same(f["delay_s"], [m.delay_s for _, m in msgs])


def test_a_cut_off_bag_reads_like_read_bag(tmp_path, bag):
    cut = tmp_path / "cut"
    cut.mkdir()
    for f in bag.iterdir():
        (cut / f.name).write_bytes(f.read_bytes())
    cut_bag(cut, 0.55)
    slow = read_bag(cut)
    fast = fastbag.read_raw(cut, ALL)
    assert fast.truncated and slow.truncated
    for topic in ALL:
        assert fast.count(topic) == slow.count(topic) > 0
        log_ns, _ = fastbag.topic_arrays(fast, topic)
        assert list(log_ns) == [t for t, _ in slow.messages(topic)]


def test_a_sqlite3_bag_from_another_recorder_is_read(tmp_path):
    """A lab bag written by rosbag2's default sqlite3 storage, with a driver's pose topic."""
    path = tmp_path / "lab_bag"
    topic = "/vrpn_mocap/tb4/pose"
    store = rosmsg.typestore()
    expected = []
    with Writer(path, version=9) as writer:
        conn = writer.add_connection(topic, rosmsg.POSE_STAMPED, typestore=store)
        for i in range(50):
            t = 1_700_000_000_000_000_000 + i * 10_000_000
            msg = rosmsg.pose_stamped(t, "world", (i * 0.01, 0.5, 0.1), rosmsg.yaw_quaternion(0.01 * i))
            writer.write(conn, t, rosmsg.serialize(msg, rosmsg.POSE_STAMPED))
            expected.append(i * 0.01)
    raw = fastbag.read_raw(path, {topic})
    assert raw.path.suffix == ".db3"
    _, f = fastbag.topic_arrays(raw, topic)
    assert _same(f["px"], expected)


def test_not_a_bag_is_a_one_line_error(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "junk_0.mcap").write_bytes(b"this is not an mcap file at all")
    with pytest.raises(fastbag.BagError, match="junk_0.mcap: not an MCAP file"):
        fastbag.read_raw(tmp_path / "junk", ALL)
    with pytest.raises(fastbag.BagError, match="no such bag"):
        fastbag.read_raw(tmp_path / "missing", ALL)
