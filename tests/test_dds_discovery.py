"""DDS discovery as the lab does it (AllowMulticast spdp), and the link's traffic by kind in the record.

The trials run the real CycloneDDS participants in network namespaces on an emulated link; what
crossed the robot's link is read back from the trial's own capture (``link.pcap``) twice: by UDP
destination (the SPDP multicast group and port) and by the record's summary by RTPS kind.
"""

from __future__ import annotations

import struct

import pytest

from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.dds.settings import Settings as DdsSettings
from fieldtest.middleware.dds.settings import discovery_used
from fieldtest.middleware.dds.transport import cyclonedds_xml
from fieldtest.netem import linktraffic
from fieldtest.netem.linktraffic import CAPTURE_FILE, summarize, udp_destinations
from fieldtest.plan import SquarePlan
from fieldtest.record import RECEIPTS_TOPIC, TrialRequest, read_bag, read_trial
from fieldtest.runner import run_twin_trial
from fieldtest.testkit import needs

# 5.5 s of commands: discovery is over before the first; the square's shape is not what is checked
PLAN = SquarePlan(side_duration_s=0.75, turn_rate_dps=180.0, laps=1, start_delay_s=0.5)
SPDP_GROUP = "239.255.0.1"  # CycloneDDS's default SPDP multicast address (DDS-RTPS 2.3, 9.6.1.4.1)


def spdp_port(domain_id: int) -> int:
    """DDS-RTPS 2.3, 9.6.1.1: PB + DG * domain + d0 = 7400 + 250 * domain."""
    return 7400 + 250 * domain_id


def _short_dds_trial(network: str, discovery: str | None, tmp_path):
    transport = (
        {"middleware": "dds"} if discovery is None else {"middleware": "dds", "dds_discovery": discovery}
    )
    request = TrialRequest(
        name=f"discovery-{discovery}",
        plan=PLAN,
        network=network,
        transport=transport,
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    receipts = list(read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC))
    assert receipts, "the robot received no command"
    return result.trial_dir, read_trial(result.trial_dir)


@pytest.mark.parametrize(
    ("network", "discovery"),
    [
        ("ethernet", None),
        ("ethernet", "all"),
        ("wifi", "spdp"),
        ("wifi-80211", "spdp"),  # ns-3's access point relays the group frames at its basic rate
        ("ethernet", "none"),
        ("wifi", "none"),
    ],
)
def test_participants_discover_through_multicast_spdp_only_when_asked(tmp_path, network, discovery):
    """spdp (the default, as the lab) and all: the participants have no unicast peer, so a completed
    trial means they found each other through the SPDP datagrams seen on the robot's link, sent to
    239.255.0.1:7400+250*domain; none: not one datagram to a multicast group crosses."""
    needs.netns()
    needs.tools("tcpdump")
    trial_dir, record = _short_dds_trial(network, discovery, tmp_path)
    used = discovery or "spdp"
    assert record.outcome.dds_discovery == used
    assert f"dds_discovery: {used}" in (trial_dir / "trial.yaml").read_text()
    port = spdp_port(record.request.transport.domain_id)
    destinations = list(udp_destinations(trial_dir / CAPTURE_FILE))
    to_spdp_group = destinations.count((SPDP_GROUP, port))
    to_any_group = sum(1 for address, _ in destinations if address.startswith(("224.", "239.")))
    kinds = record.outcome.link_traffic["kinds"]
    if used == "none":
        assert to_any_group == 0 and kinds["spdp"]["multicast_packets"] == 0
        assert kinds["spdp"]["packets"] > 0  # the same announcements, by unicast to the peers
    else:
        assert to_spdp_group > 0 and kinds["spdp"]["multicast_packets"] > 0
    assert kinds["sedp"]["packets"] > 0 and kinds["user_data"]["packets"] > 0
    assert kinds["heartbeat_acknack"]["packets"] > 0  # the reliable commands' acknowledgements
    if used == "spdp":  # only participant discovery multicasts; endpoints and data go unicast
        assert kinds["sedp"]["multicast_packets"] == kinds["user_data"]["multicast_packets"] == 0


def test_cyclonedds_default_multicasts_only_discovery_from_a_wifi_interface_and_everything_from_a_wired_one():
    """CycloneDDS 0.10's AllowMulticast default by interface type (q_init.c: "presumed flaky
    multicast, use for SPDP only"): the twin resolves it by the link each role stands on."""
    config = TransportConfig(
        middleware="dds",
        dds_discovery="cyclonedds-default",
        host_address="10.77.0.1",
        robot_address="10.77.0.2",
        wifi_roles=("robot",),
    )
    assert config.settings(DdsSettings).discovery == "cyclonedds-default"
    assert discovery_used(config, "robot") == "spdp" and discovery_used(config, "host") == "all"
    assert "<AllowMulticast>spdp</AllowMulticast>" in cyclonedds_xml(config, "robot")
    assert "<AllowMulticast>true</AllowMulticast>" in cyclonedds_xml(config, "host")
    on_loopback = config.model_copy(update={"robot_address": "127.0.0.1"})
    assert discovery_used(on_loopback, "robot") == "none"


@pytest.mark.parametrize(("network", "used"), [("wifi", "spdp"), ("ethernet", "all")])
def test_a_twin_trial_on_cyclonedds_default_discovers_as_the_interface_type_says(tmp_path, network, used):
    """On a Wi-Fi profile the robot's interface stands for a Wi-Fi one: SPDP by multicast, endpoints
    and data by unicast; on ethernet CycloneDDS's default allows multicast for everything (with one
    reader per topic it still sends endpoints and data by unicast, so the capture shows SPDP only)."""
    needs.netns()
    needs.tools("tcpdump")
    trial_dir, record = _short_dds_trial(network, "cyclonedds-default", tmp_path)
    assert record.outcome.dds_discovery == used
    assert record.request.transport.wifi_roles == (("host", "robot") if network == "wifi" else ())
    assert not any("loopback has no multicast" in w for w in record.outcome.warnings)
    kinds = record.outcome.link_traffic["kinds"]
    assert kinds["spdp"]["multicast_packets"] > 0
    if used == "spdp":
        assert kinds["sedp"]["multicast_packets"] == kinds["user_data"]["multicast_packets"] == 0


def test_on_loopback_the_participants_fall_back_to_unicast_and_the_record_says_so(tmp_path):
    _, record = _short_dds_trial("loopback", "spdp", tmp_path)
    assert record.outcome.dds_discovery == "none"
    assert any("loopback has no multicast" in w for w in record.outcome.warnings)
    assert record.outcome.link_traffic == {}


# ---- the capture's reader, on frames built here byte by byte ----


def _rtps(*submessages: bytes) -> bytes:
    return b"RTPS" + bytes([2, 3, 1, 16]) + bytes(12) + b"".join(submessages)


def _submessage(sub_id: int, body: bytes) -> bytes:
    return struct.pack("<BBH", sub_id, 0x01, len(body)) + body  # flags: little endian


def _data(writer_hex: str) -> bytes:
    return _submessage(0x15, struct.pack("<HH", 0, 16) + bytes(4) + bytes.fromhex(writer_hex) + bytes(16))


INFO_TS = _submessage(0x09, bytes(8))
HEARTBEAT = _submessage(0x07, bytes(28))
ACKNACK = _submessage(0x06, bytes(24))


def _frame(payload: bytes, dst: str = "10.77.0.2", proto: int = 17, fragment_offset: int = 0) -> bytes:
    udp = proto == 17 and not fragment_offset
    transport = struct.pack(">HHHH", 7411, 7410, 8 + len(payload), 0) + payload if udp else payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(transport), 0, fragment_offset, 64, proto, 0,
                     bytes([10, 77, 0, 1]), bytes(int(o) for o in dst.split(".")))  # fmt: skip
    return bytes(6) + bytes(6) + b"\x08\x00" + ip + transport


def _pcap(path, frames: list[bytes], snap: int = linktraffic.SNAP_BYTES) -> None:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snap, 1)
    for i, frame in enumerate(frames):
        kept = frame[:snap]
        out += struct.pack("<IIII", i, 0, len(kept), len(frame)) + kept
    path.write_bytes(out)


def test_frames_are_sorted_by_rtps_kind_with_wire_bytes_and_rates(tmp_path):
    frames = [
        _frame(_rtps(INFO_TS, _data("000100c2")), dst=SPDP_GROUP),  # SPDP announcement, multicast
        _frame(_rtps(INFO_TS, _data("000100c2"))),  # SPDP by unicast
        _frame(_rtps(_data("000003c2"), HEARTBEAT)),  # SEDP publications
        _frame(_rtps(_data("000004c2"))),  # SEDP subscriptions
        _frame(_rtps(INFO_TS, _data("00001203"), HEARTBEAT) + bytes(1000)),  # a user sample, cut by the snap
        _frame(_rtps(ACKNACK)),
        _frame(_rtps(HEARTBEAT)),
        _frame(_rtps(INFO_TS)),
        _frame(_rtps(INFO_TS, _submessage(0x31, bytes(8)), _submessage(0x30, bytes(40)))),  # DDS Security
        _frame(_rtps(_data("000100c2")), fragment_offset=185),  # a later fragment: no UDP header
        _frame(b"not rtps at all"),
        _frame(bytes(40), proto=6),
        bytes(12) + b"\x08\x06" + bytes(28),  # ARP
    ]
    _pcap(tmp_path / "t.pcap", frames)
    summary = summarize(tmp_path / "t.pcap", duration_s=2.0)
    kinds = summary["kinds"]
    packets = {kind: row["packets"] for kind, row in kinds.items()}
    assert packets == {"spdp": 2, "sedp": 2, "user_data": 1, "heartbeat_acknack": 2, "rtps_protected": 1,
                       "rtps_other": 1, "ip_fragment": 1, "udp_other": 1, "tcp": 1, "other": 1}  # fmt: skip
    assert kinds["spdp"]["multicast_packets"] == 1 and kinds["sedp"]["multicast_packets"] == 0
    assert kinds["user_data"]["bytes"] == len(frames[4]) > linktraffic.SNAP_BYTES  # wire length, not the snap
    assert kinds["heartbeat_acknack"]["packets_per_s"] == 1.0
    assert kinds["spdp"]["bytes_per_s"] == (len(frames[0]) + len(frames[1])) / 2
    destinations = list(udp_destinations(tmp_path / "t.pcap"))
    assert (
        destinations[0] == (SPDP_GROUP, 7410) and len(destinations) == len(frames) - 3
    )  # no TCP, ARP, fragment


def test_a_file_that_is_not_a_pcap_is_named(tmp_path):
    (tmp_path / "x.pcap").write_bytes(b"hello, this is not a capture file")
    with pytest.raises(linktraffic.CaptureError, match="x.pcap: not a pcap file"):
        summarize(tmp_path / "x.pcap", 1.0)


def test_discovery_is_a_campaign_axis_and_a_command_line_option():
    import argparse

    from fieldtest.runner.cli import add_common_args, request_from_args
    from fieldtest.trialcampaign import expand, parse_campaign

    campaign = parse_campaign({"campaign": "disc", "matrix": {"dds_discovery": ["spdp", "all", "none"]}})
    assert [t.transport.settings(DdsSettings).discovery for t in expand(campaign)] == ["spdp", "all", "none"]
    with pytest.raises(ValueError, match=r"dds\.discovery"):
        expand(parse_campaign({"campaign": "bad", "matrix": {"dds_discovery": ["sometimes"]}}))
    parser = argparse.ArgumentParser()
    add_common_args(parser)
    assert request_from_args(parser.parse_args([]), "dds").transport.settings(DdsSettings).discovery == "spdp"
    chosen = request_from_args(parser.parse_args(["--dds-discovery", "none"]), "dds")
    assert chosen.transport.settings(DdsSettings).discovery == "none"


@pytest.mark.parametrize("discovery", ["spdp", "all"])
def test_multicast_discovery_on_a_link_that_drops_multicast_is_refused_before_the_trial(discovery):
    """The participants would never meet (or lose each other when a fault turns multicast off and
    their leases run out): the campaign names the field and the fix on one line; none passes."""
    from fieldtest.trialcampaign import CampaignError, expand, parse_campaign

    no_multicast = {"name": "no-multicast", "extends": "wifi", "multicast": False}
    base = {
        "transport": {"middleware": "dds", "dds_discovery": discovery},
        "network": "wifi",
        "faults": [{"kind": "profile", "at_s": 2.0, "profile": no_multicast}],
    }
    with pytest.raises(CampaignError) as refused:
        expand(parse_campaign({"campaign": "nomc", "base": base}))
    message = str(refused.value)
    assert "\n" not in message and "transport.dds.discovery" in message and "'no-multicast'" in message
    assert "set transport.dds.discovery: none" in message
    unicast = {**base, "transport": {"middleware": "dds", "dds_discovery": "none"}}
    assert expand(parse_campaign({"campaign": "nomc", "base": unicast}))[0].faults
    mqtt = {**base, "transport": {"middleware": "mqtt-broker"}}  # no DDS across the link
    assert expand(parse_campaign({"campaign": "nomc", "base": mqtt}))[0].faults
