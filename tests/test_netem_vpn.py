"""The VPN network setting (fieldtest.netem.vpn): a perf row over OpenVPN carries its traffic inside
the tunnel, and a tunnel whose peer cannot be reached is one line, not a hang."""

from __future__ import annotations

import os

import pytest

from fieldtest.netem.linktraffic import CAPTURE_FILE, udp_destinations
from fieldtest.netem.profiles import Direction, LinkProfile
from fieldtest.netem.topology import PREFIX, Topology, TopologyError, list_namespaces
from fieldtest.netem.vpn import DATA_CIPHER, OPENVPN_PORT
from fieldtest.perf.case import PerfCase
from fieldtest.perf.run import CombinationRefused, PerfInputError, check_case, run_row
from fieldtest.record.reference import Conditions, VpnCompareRow
from fieldtest.testkit import needs
from fieldtest.testkit.docblocks import vpn_compare_findings

RTPS_KINDS = ("spdp", "sedp", "user_data", "heartbeat_acknack", "rtps_protected", "rtps_other")


def test_a_perf_row_over_the_vpn_crosses_the_link_only_as_openvpn_udp(tmp_path):
    needs.netns()
    needs.tools("tcpdump", "openvpn")
    case = PerfCase(
        middleware="dds", network="ethernet", vpn="openvpn", message="Array4k", rate_hz=20, duration_s=1
    )
    row = run_row(case, tmp_path)
    assert row.status == "ok", row.error
    assert row.figures["received"] >= 15
    vpn = row.link["vpn"]
    assert vpn["data_cipher"] == DATA_CIPHER and vpn["members"]["robot"]["address"].startswith("10.79.")
    # the robot's leg, captured under the tunnel: every datagram is OpenVPN's, no RTPS in the clear
    kinds = row.link["traffic"]["kinds"]
    assert all(kinds[kind]["packets"] == 0 for kind in RTPS_KINDS), kinds
    ports = list(udp_destinations(tmp_path / CAPTURE_FILE))
    assert len(ports) >= 2 * row.figures["received"]  # each ping and its echo, at least
    assert {port for _address, port in ports} == {OPENVPN_PORT}
    assert b"RTPS" not in (tmp_path / CAPTURE_FILE).read_bytes()


def test_a_vpn_whose_peer_is_unreachable_is_one_line_and_leaves_nothing(tmp_path):
    needs.netns()
    needs.tools("openvpn")
    cut = LinkProfile(name="cut", up=Direction(loss_pct=100), down=Direction(loss_pct=100))
    with pytest.raises(TopologyError) as refused:
        Topology(cut, vpn="openvpn", vpn_timeout_s=2)
    message = str(refused.value)
    assert "\n" not in message
    assert "did not come up within 2 s" in message and "peer is down or unreachable" in message
    assert not [ns for ns in list_namespaces() if ns.startswith(f"{PREFIX}-{os.getpid()}-")]


@pytest.mark.parametrize(
    ("case", "refusal", "says"),
    [
        (
            PerfCase(vpn="wireguard", network="ethernet"),
            PerfInputError,
            "vpn 'wireguard': use none or openvpn",
        ),
        (PerfCase(vpn="openvpn"), PerfInputError, "needs an emulated network"),
        (
            PerfCase(middleware="mqtt-broker", vpn="openvpn", network="ethernet"),
            CombinationRefused,
            "host and robot only",
        ),
        (
            PerfCase(vpn="openvpn", network="ethernet", subscribers=2),
            CombinationRefused,
            "host and robot only",
        ),
    ],
)
def test_a_vpn_row_that_cannot_run_is_refused_before_anything_starts(case, refusal, says):
    with pytest.raises(refusal, match=says):
        check_case(case)


def _compare_row(protection: str, size: int, latency_ms: float, throughput: float) -> VpnCompareRow:
    idle = Conditions(load_1min=0.1, busy_percent=[1.0], steal_percent=0.0)
    return VpnCompareRow(
        network="ethernet", protection=protection, message=f"Array{size}", size_b=size, latency_ms=latency_ms,
        latency_half95_ms=None, throughput_mb_s=throughput, throughput_half95_mb_s=None, runs_latency=2,
        runs_throughput=2, conditions=idle,
    )  # fmt: skip


def test_kims_findings_are_checked_size_by_size_on_the_rows():
    rows = [
        _compare_row("none", 16, 1.0, 0.016),
        _compare_row("sros2", 16, 1.2, 0.016),
        _compare_row("openvpn", 16, 1.5, 0.012),  # more added latency than SROS2, less throughput
        _compare_row("none", 12000, 1.0, 12.0),
        _compare_row("sros2", 12000, 2.0, 6.0),
        _compare_row("openvpn", 12000, 1.4, 11.0),  # less than half SROS2's added latency, faster
    ]
    (line,) = vpn_compare_findings(rows)
    assert line == (
        "ethernet: of 2 payload sizes, the VPN added less latency than sros2 at 12000 B, less than half of it "
        "at 12000 B; its throughput was higher than sros2's at 12000 B."
    )
