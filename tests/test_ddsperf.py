import os

import pytest

from fieldtest.procs import lease_dds_domain
from fieldtest.testkit import needs
from fieldtest.testkit.ddsperf import (
    DdsperfError,
    PingInterval,
    find_ddsperf,
    loopback_config_xml,
    parse_ping_output,
    run_pingpong,
    summarize,
)

# Captured from `ddsperf -i 211 -D 4 -Qminmatch:1 -Qinitwait:3 ping 100Hz size 64` on this machine.
SAMPLE_PING_OUTPUT = """\
[16718] participant vm:16718: new (self)
[16718] participant vm:16717: new
[16718] 1.000  vm:16717 size 64 mean 104.374us min 50.109us 50% 102.802us 90% 118.791us 99% 227.748us max 227.748us cnt 99
[16718] 1.000  rss:7.3MB vcsw:217 ivcsw:10 ddsperf:1%+0%
[16718] 2.000  vm:16717 size 64 mean 113.513us min 65.041us 50% 107.084us 90% 148.089us 99% 285.907us max 285.907us cnt 100
[16718] 2.000  rss:7.3MB vcsw:214 ivcsw:7 ddsperf:2%+1%
[16718] 3.000  vm:16717 size 64 mean 117.173us min 53.939us 50% 100.283us 90% 133.803us 99% 733.213us max 733.213us cnt 100
[16718] 3.000  rss:7.3MB vcsw:216 ivcsw:5 ddsperf:1%+0% recvUC:1%+0%
[16718] 4.000  vm:16717 size 64 mean 110.074us min 62.197us 50% 99.327us 90% 113.057us 99% 977.392us max 977.392us cnt 100
[16718] 4.000  rss:7.3MB vcsw:211 ivcsw:1 ddsperf:1%+0%
"""

# A DDS domain of this test process's own, leased until it exits: a parallel run on this machine
# (another test worker, a demo) never shares it.
DDS_DOMAIN = lease_dds_domain(200 + os.getpid() % 30)


def test_parse_reads_each_per_second_line_and_skips_the_rest():
    intervals = parse_ping_output(SAMPLE_PING_OUTPUT)
    assert [i.t_s for i in intervals] == [1.0, 2.0, 3.0, 4.0]
    first = intervals[0]
    assert first == PingInterval(
        t_s=1.0,
        peer="vm:16717",
        size=64,
        mean_us=104.374,
        min_us=50.109,
        p50_us=102.802,
        p90_us=118.791,
        p99_us=227.748,
        max_us=227.748,
        count=99,
    )


def test_summary_pools_counts_exactly_and_keeps_percentiles_within_the_lines():
    intervals = parse_ping_output(SAMPLE_PING_OUTPUT)
    s = summarize(intervals)
    assert s.count == 399
    expected_mean = (99 * 104.374 + 100 * 113.513 + 100 * 117.173 + 100 * 110.074) / 399
    assert s.mean_us == pytest.approx(expected_mean)
    assert (s.min_us, s.max_us) == (50.109, 977.392)
    # Each pooled percentile lies between the smallest and largest per-second value of it.
    for name in ("p50_us", "p90_us", "p99_us"):
        values = [getattr(i, name) for i in intervals]
        assert min(values) - 1.0 <= getattr(s, name) <= max(values) + 1.0
    assert s.p50_us < s.p90_us < s.p99_us <= s.max_us


def test_summary_of_one_line_reproduces_its_median():
    (line,) = parse_ping_output(SAMPLE_PING_OUTPUT.splitlines()[2])
    s = summarize([line])
    assert s.p50_us == pytest.approx(line.p50_us, rel=0.01)
    assert s.count == line.count


def test_output_without_latency_lines_is_a_clear_error():
    with pytest.raises(DdsperfError, match="captured.txt: no ddsperf ping latency lines"):
        parse_ping_output("[1] participant vm:1: new (self)\n", "captured.txt")


def test_missing_binary_is_named():
    with pytest.raises(DdsperfError, match="no-such-ddsperf: ddsperf is not installed"):
        find_ddsperf("no-such-ddsperf")


def test_reference_uses_the_kits_own_dds_configuration():
    needs.module("cyclonedds")
    from fieldtest.middleware.dds.transport import cyclonedds_xml
    from fieldtest.transport import TransportConfig

    assert loopback_config_xml() == cyclonedds_xml(TransportConfig(), "host")
    assert loopback_config_xml() == cyclonedds_xml(TransportConfig(), "robot")


def test_real_ping_pong_on_loopback():
    needs.tools("ddsperf")
    result = run_pingpong(rate_hz=50, size=76, duration_s=2, domain_id=DDS_DOMAIN.domain_id)
    assert len(result.intervals) >= 1
    one_way = result.one_way
    assert one_way.count >= 20  # 50 Hz for about 2 s, after discovery
    assert 0 < one_way.min_us <= one_way.p50_us <= one_way.p99_us <= one_way.max_us
    assert all(i.size == 76 for i in result.intervals)
