"""Message helpers: where transports stamp serialized messages."""

import pytest

from fieldtest import rosmsg

NS = 1_765_432_109_876_543_210  # a time whose sec and nanosec bytes are all distinct from zero


def _probe(**times):
    fields = {name: rosmsg.time_msg(times.get(name, 0)) for name in ("t1", "t2", "t3")}
    return rosmsg.msg_class(rosmsg.CLOCK_PROBE)(id=0xA1B2C3D4, **fields)


@pytest.mark.parametrize(
    ("field", "blank", "stamped"),
    [
        (
            rosmsg.COMMAND_SENT,
            lambda: rosmsg.command(9, 0, 0.33, 0.5),
            lambda: rosmsg.command(9, NS, 0.33, 0.5),
        ),
        (rosmsg.PROBE_T1, lambda: _probe(t3=5), lambda: _probe(t1=NS, t3=5)),
        (rosmsg.PROBE_T3, lambda: _probe(t1=5), lambda: _probe(t1=5, t3=NS)),
    ],
    ids=["command", "probe-t1", "probe-t3"],
)
def test_time_field_patches_the_bytes_rosbags_would_write(field, blank, stamped):
    data = bytearray(rosmsg.serialize(blank(), field.typename))
    field.patch(data, NS)
    assert bytes(data) == rosmsg.serialize(stamped(), field.typename)
    msg = blank()
    field.set(msg, NS)
    assert rosmsg.serialize(msg, field.typename) == bytes(data)


def test_time_field_refuses_big_endian_cdr():
    data = bytearray(rosmsg.serialize(rosmsg.command(0, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED))
    data[1] = 0  # CDR_BE
    with pytest.raises(ValueError, match="big-endian"):
        rosmsg.COMMAND_SENT.patch(data, NS)


@pytest.mark.parametrize("name", ["Array1k", "Array64k", "Array2m", "PointCloud512k"])
def test_deserialize_reads_a_payload_in_place_and_copies_mutable_input_once(name):
    """A subscriber's payload array is a read-only view on the received bytes (rosbags reads it with
    numpy.frombuffer), not on a copy of them (the old deserialize copied all but the CDR header);
    a bytearray is copied first, so changing it later cannot change the message."""
    import numpy as np

    from fieldtest.perf.messages import build, parse_message

    message = parse_message(name)
    data = bytes(build(message).cdr)
    msg = rosmsg.deserialize(data, message.typename)
    assert np.shares_memory(msg.data, np.frombuffer(data, np.uint8))
    assert not msg.data.flags.writeable and len(msg.data) == message.size
    mutable = bytearray(data)
    kept = rosmsg.deserialize(memoryview(mutable), message.typename)
    mutable[:] = bytes(len(mutable))
    assert rosmsg.serialize(kept, message.typename) == data
