"""Clock-offset math with known offsets and delays."""

import math
import random

import pytest

from fieldtest.clocksync import (
    MinDelayFilter,
    ProbeInitiator,
    ProbeSample,
    best_offset,
    offset_and_delay,
    one_way_latency_s,
    to_responder_ns,
)

MS = 1_000_000
S = 1_000_000_000


def exchange(offset_ns: int, t1: int, out_ns: int, hold_ns: int, back_ns: int) -> tuple[int, int, int, int]:
    """Timestamps of one probe: responder clock = initiator clock + offset_ns."""
    t2 = t1 + out_ns + offset_ns
    t3 = t2 + hold_ns
    t4 = t3 - offset_ns + back_ns
    return t1, t2, t3, t4


def test_symmetric_paths_give_the_exact_offset_and_the_round_trip():
    offset, delay = offset_and_delay(*exchange(5 * S, 1000 * S, 2 * MS, 7 * MS, 2 * MS))
    assert offset == pytest.approx(5.0, abs=1e-12)
    assert delay == pytest.approx(0.004, abs=1e-12)


def test_asymmetric_paths_err_by_half_the_asymmetry():
    offset, delay = offset_and_delay(*exchange(-3 * S, 50 * S, 3 * MS, 0, 1 * MS))
    assert delay == pytest.approx(0.004)
    assert offset == pytest.approx(-3.0 + 0.001)  # (out - back) / 2
    assert abs(offset - (-3.0)) <= delay / 2


def test_latency_correction_and_time_conversion():
    # robot clock 5 s ahead of the host: offset (host - robot) = -5 s
    sent_host = 100 * S
    received_robot = sent_host + 5 * S + 2 * MS
    assert one_way_latency_s(sent_host, received_robot, -5.0) == pytest.approx(0.002)
    assert math.isnan(one_way_latency_s(sent_host, received_robot, math.nan))
    assert to_responder_ns(received_robot, -5.0) == sent_host + 2 * MS


def test_min_delay_filter_keeps_the_best_of_its_window():
    f = MinDelayFilter(window=3)
    assert math.isnan(f.offset_s)
    delays = [5, 1, 4, 6, 7]
    for i, d in enumerate(delays):
        f.add(ProbeSample(i, *exchange(i * MS, i * S, d * MS, 0, 0)))  # offset error = d/2
    assert f.best.id == 2  # the 1 ms sample (id 1) has left the 3-sample window
    assert len(f) == 3
    samples = [ProbeSample(i, *exchange(0, i * S, d * MS, 0, d * MS)) for i, d in enumerate(delays)]
    assert best_offset(samples).id == 1
    assert best_offset([]) is None
    with pytest.raises(ValueError):
        MinDelayFilter(window=0)


def test_initiator_bursts_until_answered_then_slows_down():
    init = ProbeInitiator(burst=3, burst_interval_s=0.05, interval_s=0.5)
    now = 10 * S
    assert init.due(now)
    gaps = []
    for _ in range(5):
        probe_id, t1 = init.make_probe(now)
        assert init.next_due_ns() - now == 50 * MS or init.completed >= 3  # unanswered: keep bursting
        t1_, t2, t3, t4 = exchange(2 * S, t1, MS, 0, MS)
        assert init.on_reply(probe_id, t1_, t2, t3, t4) is not None
        gaps.append(init.next_due_ns() - now)
        assert not init.due(now + gaps[-1] - 1) and init.due(now + gaps[-1])
        now = init.next_due_ns()
    assert gaps == [50 * MS, 50 * MS, 500 * MS, 500 * MS, 500 * MS]
    assert init.offset_s == pytest.approx(2.0)
    assert init.delay_s == pytest.approx(0.002)


def test_initiator_ignores_replies_it_cannot_trust():
    init = ProbeInitiator(timeout_s=1.0)
    probe_id, t1 = init.make_probe(100 * S)
    _, t2, t3, t4 = exchange(0, t1, MS, 0, MS)
    assert init.on_reply(probe_id + 1, t1, t2, t3, t4) is None  # unknown id
    assert init.on_reply(probe_id, t1 + 1, t2, t3, t4) is None  # t1 does not match
    assert init.on_reply(probe_id, t1, t2, t2 - 1, t4) is None  # t3 before t2: not a reply
    assert init.on_reply(probe_id, t1, t2, t3, t4) is not None
    assert init.on_reply(probe_id, t1, t2, t3, t4) is None  # duplicate
    late_id, late_t1 = init.make_probe(200 * S)
    _, t2, t3, t4 = exchange(0, late_t1, 2 * S, 0, MS)
    assert init.on_reply(late_id, late_t1, t2, t3, t4) is None  # after the timeout
    assert init.ignored == 5
    assert init.completed == 1


def test_estimate_with_random_asymmetric_delays_is_within_half_the_best_round_trip():
    rng = random.Random(3)
    true_offset = -7 * S + 123_456
    init = ProbeInitiator(burst=10, window=16)
    now = 1_000 * S
    delays = []
    for _ in range(40):
        probe_id, t1 = init.make_probe(now)
        out, back = rng.randint(200_000, 20 * MS), rng.randint(200_000, 20 * MS)
        delays.append((out + back) / S)
        t2 = t1 + out + true_offset
        t3 = t2 + 50_000  # the responder's hold time
        init.on_reply(probe_id, t1, t2, t3, t3 - true_offset + back)
        now = init.next_due_ns()
    error = abs(init.offset_s - true_offset / S)
    print(f"offset error {error * 1e6:.1f} us with best round trip {init.delay_s * 1e3:.2f} ms")
    assert error <= init.delay_s / 2 + 1e-9
    assert init.delay_s == pytest.approx(min(delays[-16:]))  # the window's best (hold time excluded)
    assert init.completed == 40


def test_send_probe_registers_the_t1_the_sender_stamped():
    init = ProbeInitiator()
    probe_id, t1 = init.send_probe(lambda pid: 5 * S + pid)  # the transport's stamp, not "now"
    assert (probe_id, t1) == (0, 5 * S)
    assert init.next_due_ns() == t1 + init.burst_interval_ns
    assert init.on_reply(probe_id, t1 - 1, t1 + MS, t1 + 2 * MS, t1 + 3 * MS) is None  # t1 must match
    sample = init.on_reply(probe_id, t1, t1 + MS, t1 + 2 * MS, t1 + 3 * MS)
    assert sample is not None and sample.delay_s == pytest.approx(2e-3)


def _probe_round(init: ProbeInitiator, now: int, offset_ns: int, warm_ns: int, cold_extra_ns: int) -> int:
    """One scheduled probe sent after idle (its request leg cold), then the follow-up the initiator
    asks for (both legs warm); returns when the next scheduled probe is due."""
    follow_up = False
    while True:
        probe_id, t1 = init.send_probe(lambda _pid, t=now: t, follow_up=follow_up)
        out = warm_ns if follow_up else warm_ns + cold_extra_ns
        sample = init.on_reply(probe_id, *exchange(offset_ns, t1, out, 20_000, warm_ns))
        assert sample is not None and sample.follow_up is follow_up
        if not init.wants_follow_up(sample):
            return init.next_due_ns()
        follow_up, now = True, exchange(offset_ns, t1, out, 20_000, warm_ns)[3]


@pytest.mark.parametrize("follow_up", [True, False])
def test_follow_up_probes_remove_the_bias_of_a_cold_request_leg(follow_up):
    offset_ns, warm_ns, cold_extra_ns = 3 * S + 777, 50_000, 100_000
    init = ProbeInitiator(follow_up=follow_up)
    now = 100 * S
    for _ in range(12):
        now = _probe_round(init, now, offset_ns, warm_ns, cold_extra_ns)
    error_ns = init.offset_s * S - offset_ns
    if follow_up:  # the follow-ups (both legs warm) have the least delay, so the filter keeps them
        assert init.sent == 24 and abs(error_ns) < 1 and init.filter.best.follow_up
        assert init.delay_s == pytest.approx(2 * warm_ns / S)
    else:  # every sample carries half the cold leg's extra time
        assert init.sent == 12 and error_ns == pytest.approx(cold_extra_ns / 2, abs=1)


def test_a_follow_up_is_asked_for_only_after_a_scheduled_probe():
    init = ProbeInitiator()
    probe_id, t1 = init.make_probe(10 * S)
    first = init.on_reply(probe_id, *exchange(0, t1, MS, 0, MS))
    assert init.wants_follow_up(first) and not first.follow_up
    probe_id, t1 = init.send_probe(lambda _pid: 11 * S, follow_up=True)
    second = init.on_reply(probe_id, *exchange(0, t1, MS, 0, MS))
    assert second.follow_up and not init.wants_follow_up(second)
    assert not init.wants_follow_up(None)  # an ignored reply asks for nothing
