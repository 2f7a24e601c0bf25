"""What perf's relay reads from a ping's CDR bytes without decoding it, and the ``Undecoded``
subscriptions that hand it those bytes (``fieldtest.transport.base``)."""

from __future__ import annotations

import pytest

from fieldtest import rosmsg
from fieldtest.endpoints.clock import Clock
from fieldtest.perf.messages import build, copy_seq, ids_of, parse_message, seq_of_cdr, set_ids
from fieldtest.transport.base import Undecoded, decoder, timed_subscribe


@pytest.mark.parametrize("name", ["Array1k", "Array64k", "PointCloud512k"])
def test_the_relay_reads_and_copies_the_sequence_number_in_the_bytes(name):
    message = parse_message(name)
    ping, echo = build(message), build(message)
    set_ids(ping, 1234567, 0)
    set_ids(echo, 0, 3)
    data = bytes(ping.cdr)
    assert seq_of_cdr(data) == 1234567
    copy_seq(echo, data)
    assert ids_of(rosmsg.deserialize(bytes(echo.cdr), message.typename)) == (1234567, 3)  # its relay kept


def test_the_send_stamp_is_read_where_it_was_patched():
    field = rosmsg.TimeField(rosmsg.HEADER, ("stamp",), 4)
    data = bytearray(rosmsg.serialize(rosmsg.header(0, "x"), rosmsg.HEADER))
    for ns in (0, 1_700_000_000_123_456_789, 999_999_999):
        field.patch(data, ns)
        assert field.read(bytes(data)) == ns
        assert rosmsg.ns_of(rosmsg.deserialize(bytes(data), rosmsg.HEADER).stamp) == ns


def test_bytes_that_are_not_a_perf_message_are_refused():
    data = rosmsg.serialize(rosmsg.header(0, "seq:00000000x1@001"), rosmsg.HEADER)
    with pytest.raises(ValueError):
        seq_of_cdr(data)
    other = rosmsg.serialize(rosmsg.header(0, "a frame of another kind"), rosmsg.HEADER)
    with pytest.raises(ValueError, match="not a perf message"):
        seq_of_cdr(other)


def test_an_undecoded_receiver_gets_the_bytes_and_its_failure_is_only_logged(caplog):
    got = []
    sample = rosmsg.serialize(rosmsg.header(5, "ok"), rosmsg.HEADER)
    decode = decoder(rosmsg.HEADER, Undecoded(lambda data, arrival: got.append((data, arrival))), "/x")
    decode(bytearray(sample), 7)
    decode(memoryview(sample), 8)
    assert got == [(sample, 7), (sample, 8)] and all(type(data) is bytes for data, _ in got)
    failing = decoder(rosmsg.HEADER, Undecoded(lambda data, arrival: 1 / 0), "/y")
    failing(sample, 9)
    assert "error handling a std_msgs/msg/Header sample on /y" in caplog.text


class DecodingTransport:
    """A transport that hands its subscribers decoded messages only (no ``timed_subscribe``)."""

    def __init__(self):
        self.callbacks = []

    def subscribe(self, topic, typename, callback):
        self.callbacks.append(callback)


def test_an_undecoded_receiver_on_a_decoding_transport_gets_the_bytes_again():
    transport, got = DecodingTransport(), []
    timed_subscribe(transport, "/x", rosmsg.HEADER, Undecoded(lambda d, t: got.append((d, t))), Clock())
    msg = rosmsg.header(5, "seq:0000000042@000")
    transport.callbacks[0](msg)
    data, arrival = got[0]
    assert data == rosmsg.serialize(msg, rosmsg.HEADER) and arrival > 0
