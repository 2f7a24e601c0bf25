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
