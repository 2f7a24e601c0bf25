"""The MQTT arrival stamp: the socket's wake-up, stamped in C on CLOCK_MONOTONIC, moved onto the
subscriber's clock. A thread switch between the two clocks' reads (another Python thread holding the
GIL) must not move the stamp: it once put a command's arrival before its send."""

import time

import pytest

from fieldtest.middleware.mqtt.transport import _offset_from_monotonic

BASE_NS = 5_000_000_000  # the subscriber's clock: CLOCK_MONOTONIC plus five seconds


@pytest.mark.parametrize("switched_read", [0, 1, 2])
@pytest.mark.parametrize("switch_s", [0.005, 0.02])
def test_a_thread_switch_between_the_clock_reads_does_not_move_the_stamp(switched_read, switch_s):
    reads = []

    def clock_ns() -> int:
        reads.append(None)
        if len(reads) - 1 == switched_read:
            time.sleep(switch_s)  # another thread took the GIL between this read and its neighbours
        return time.monotonic_ns() + BASE_NS

    offset = _offset_from_monotonic(clock_ns)
    # judged against the switch itself: the offset is off by a small part of it at most
    assert abs(offset - BASE_NS) < switch_s * 1e9 / 4, (offset - BASE_NS) / 1e6
