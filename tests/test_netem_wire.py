"""On-wire accounting (fieldtest.netem.wire): what each direction of the robot's link carried, by kind.

Real trials first: the twin's real CycloneDDS, Mosquitto and Zenoh processes on an emulated
namespace link, whose capture the trial record accounts. The mechanisms are checked, not figures:
RELIABLE commands bring standalone HEARTBEAT/ACKNACK packets and BEST_EFFORT none; discovery counts
as discovery; every command the robot received crossed host -> robot as user data; acknowledgements
of the host's samples travel robot -> host; TLS hides MQTT and Zenoh but not their TCP acks.
Then the parser on frames built byte by byte, for the cases a trial does not show on demand.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from fieldtest.middleware.mqtt.settings import MQTT_PORT, MQTT_TLS_PORT
from fieldtest.middleware.zenoh.settings import ZENOH_PORT
from fieldtest.netem import wire
from fieldtest.plan import SquarePlan
from fieldtest.record import RECEIPTS_TOPIC, TrialRequest, read_bag, read_trial
from fieldtest.runner import run_twin_trial
from fieldtest.testkit import needs
from fieldtest.testkit.loopns import loopback_namespace

H2R, R2H = wire.HOST_TO_ROBOT, wire.ROBOT_TO_HOST
# 8.5 s of commands at 20 Hz for DDS: BEST_EFFORT's check sets the builtin endpoints' HEARTBEATs
# (about 9, whatever the length) against a tenth of the receipts. MQTT's and Zenoh's checks are
# proportions of the receipts: 5.5 s do (180 deg/s is above the base's yaw rate: it turns less).
DDS_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5)
SHORT_PLAN = SquarePlan(side_duration_s=0.75, turn_rate_dps=180.0, laps=1, start_delay_s=0.5)


def _trial(tmp_path, middleware: str, qos: str = "default", security: str = "none", faults=()):
    needs.netns()
    needs.tools("tcpdump", "mosquitto")
    request = TrialRequest(
        name=f"wire-{middleware}-{qos}-{security}",
        plan=DDS_PLAN if middleware == "dds" else SHORT_PLAN,
        network="ethernet",
        transport={"middleware": middleware, "qos": qos, "security": security},
        faults=list(faults),
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    receipts = len(list(read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)))
    assert receipts > 50, f"the robot received {receipts} commands"
    return read_trial(result.trial_dir).outcome.link_traffic["wire"]["directions"], receipts


class DdsTrials:
    """The plain DDS trial of each QoS, run once for the tests of this file that read it."""

    def __init__(self, runs):
        self.runs = runs
        self.done: dict[str, tuple[dict, int]] = {}

    def __call__(self, qos: str) -> tuple[dict, int]:
        if qos not in self.done:
            self.done[qos] = _trial(self.runs / qos, "dds", qos)
        return self.done[qos]

    def trial_dir(self, qos: str):
        self(qos)
        (trial_dir,) = [p for p in (self.runs / qos).iterdir() if (p / "trial.yaml").is_file()]
        return trial_dir


@pytest.fixture(scope="module")
def dds_trials(tmp_path_factory) -> DdsTrials:
    return DdsTrials(tmp_path_factory.mktemp("dds-runs"))


def test_the_figures_reach_metrics_json_the_report_and_compare(tmp_path, dds_trials):
    """Two DDS trials, RELIABLE and BEST_EFFORT: metrics.json keeps each direction's figures, the
    report shows them and compare sets the overhead and reliability ratio side by side."""
    from fieldtest.analysis.metrics.schema import read_metrics
    from fieldtest.analysis.pipeline import analyze_trial, compare_trials

    trials = sorted(dds_trials.trial_dir(qos) for qos in ("default", "sensor"))
    for trial_dir in trials:
        analyze_trial(trial_dir, plots=False)
        metrics = read_metrics(trial_dir / "analysis" / "metrics.json")
        assert metrics.wire is not None
        assert metrics.wire.host_to_robot.groups["user_data"].packets > 0
        assert metrics.wire.robot_to_host.kinds["spdp"].packets_per_s > 0
        report = (trial_dir / "analysis" / "report.md").read_text()
        assert "## Link traffic" in report and "| discovery |" in report
    result = compare_trials(trials, tmp_path / "cmp", page=False)
    by_qos = {read_metrics(t / "analysis" / "metrics.json").trial.qos: t for t in trials}
    rows = {row["dir"]: row for row in result["trials"]}
    reliable, best_effort = rows[str(by_qos["default"])], rows[str(by_qos["sensor"])]
    assert reliable["reliability_h2r"] > 0 and best_effort["reliability_h2r"] == 0
    assert reliable["overhead_r2h"] > best_effort["overhead_r2h"]  # the robot's ACKNACKs
    assert reliable["wire_h2r_kBps"] > 0
    assert "HB/ACKNACK per data pkt" in (tmp_path / "cmp" / "compare.md").read_text()
    assert sorted(row["middleware"] for row in result["rows"]) == ["dds", "dds (qos sensor)"]


SEND_BURST = """
import socket, sys
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(int(sys.argv[1])):
    sock.sendto(bytes(100), ("127.0.0.1", int(sys.argv[2])))
"""


@pytest.mark.parametrize("datagrams", [1, 50, 500])
def test_the_capture_keeps_what_was_sent_just_before_it_stopped(tmp_path, datagrams):
    """A burst sent right before LinkCapture.stop() is in the file, every datagram of it (tcpdump
    without immediate mode left packets in its ring's open block on SIGTERM: a short exchange, such
    as a secure DDS handshake and its samples, went missing from the capture)."""
    from fieldtest.netem.linktraffic import LinkCapture, udp_destinations

    needs.netns()
    needs.tools("tcpdump")
    port = 7411
    with loopback_namespace(f"ftcap{os.getpid()}-{datagrams}") as prefix:
        capture = LinkCapture(prefix, "lo", tmp_path / "lo.pcap")
        capture.start()
        subprocess.run([*prefix, sys.executable, "-c", SEND_BURST, str(datagrams), str(port)], check=True)
        summary = capture.stop()
    assert list(udp_destinations(tmp_path / "lo.pcap")).count(("127.0.0.1", port)) == datagrams
    assert summary["kinds"]["udp_other"]["packets"] == datagrams
    assert summary.get("dropped_by_kernel", 0) == 0


def _packets(direction: dict, kind: str) -> int:
    return direction["kinds"][kind]["packets"]


@pytest.mark.parametrize("qos", ["default", "sensor", "fernandez-a"])
def test_dds_reliability_traffic_follows_the_qos_and_discovery_counts_as_discovery(dds_trials, qos):
    """default (RELIABLE): the host's writer sends HEARTBEATs to the robot and the robot's reader
    answers with ACKNACKs, in packets of their own; sensor (BEST_EFFORT): not one such packet of an
    application endpoint (the builtin endpoints' own stay in discovery)."""
    from fieldtest.qos import get_qos

    directions, receipts = dds_trials(qos)
    to_robot, from_robot = directions[H2R], directions[R2H]
    assert _packets(to_robot, "user_data") >= receipts  # every applied command crossed this way
    for direction in (to_robot, from_robot):
        assert direction["groups"]["discovery"]["packets"] > 0
        assert _packets(direction, "spdp") > 0 and _packets(direction, "discovery_reliability") > 0
        assert direction["rtps_submessages"]["DATA"] >= _packets(direction, "user_data")
    if get_qos(qos).reliability == "reliable":
        assert to_robot["rtps_submessages"]["HEARTBEAT"] > receipts // 2  # one per few samples or more
        assert _packets(from_robot, "heartbeat_acknack") > receipts // 10  # the robot acknowledges
        assert from_robot["rtps_submessages"]["ACKNACK"] > receipts // 10
        assert to_robot["reliability_packets_per_data_packet"] > 0
    else:
        assert _packets(to_robot, "heartbeat_acknack") == _packets(from_robot, "heartbeat_acknack") == 0
        assert to_robot["reliability_packets_per_data_packet"] == 0
        assert to_robot["rtps_submessages"]["HEARTBEAT"] < receipts // 10
    assert 0 < to_robot["overhead_packet_fraction"] < 1


def test_on_a_lossy_link_reliable_retransmissions_travel_bundled_in_larger_packets(tmp_path):
    """20 % loss each way from the stream's start: RELIABLE repairs the losses by resending the
    missed samples together, so some data packets carry several DATA submessages and are far
    larger than one sample's packet (Chen's ~1006-byte bundles); BEST_EFFORT sends every sample
    once, alone, and the robot receives fewer."""
    lossy = {
        "kind": "profile",
        "at_s": 0.0,
        "profile": {"name": "lossy", "extends": "ethernet", "loss_pct": 20.0},
    }
    reliable, reliable_receipts = _trial(tmp_path / "reliable", "dds", "default", faults=[lossy])
    best_effort, best_effort_receipts = _trial(tmp_path / "best-effort", "dds", "sensor", faults=[lossy])
    assert reliable_receipts > best_effort_receipts
    bundled, single = reliable[H2R], best_effort[H2R]
    assert bundled["data_submessages_per_packet"]["max"] >= 2
    sizes = bundled["kinds"]["user_data"]["size_bytes"]
    assert sizes["max"] > 1.5 * sizes["median"], sizes
    assert single["data_submessages_per_packet"]["max"] == 1
    sizes = single["kinds"]["user_data"]["size_bytes"]
    assert sizes["p95"] == sizes["median"], sizes  # one command per packet, all of one size


def test_mqtt_publishes_acks_and_tcp_acks_by_direction_and_tls_hides_them(tmp_path):
    plain, receipts = _trial(tmp_path / "plain", "mqtt-broker")
    assert _packets(plain[H2R], "mqtt_publish") >= receipts  # the broker forwards each command
    assert _packets(plain[R2H], "mqtt_control") >= receipts // 2  # QoS 1: the robot's PUBACKs
    assert _packets(plain[H2R], "tcp_ack") > 0
    assert plain[H2R]["groups"]["tls"]["packets"] == 0 and plain[H2R]["tls_records"] == {}
    secured, receipts = _trial(tmp_path / "tls", "mqtt-broker", security="mtls-acl")
    to_robot = secured[H2R]
    assert _packets(to_robot, "mqtt_publish") == _packets(to_robot, "mqtt_control") == 0
    assert (
        to_robot["tls_records"]["application_data"] >= receipts and to_robot["tls_records"]["handshake"] >= 1
    )
    assert _packets(to_robot, "tcp_ack") > 0  # TCP's own acknowledgements stay visible
    assert to_robot["overhead_packet_fraction"] is None  # which packets carry samples is hidden


def test_zenoh_frames_carry_the_commands_and_keepalives_are_protocol(tmp_path):
    directions, receipts = _trial(tmp_path, "zenoh-peer")
    assert _packets(directions[H2R], "zenoh_data") >= receipts
    assert _packets(directions[H2R], "zenoh_control") > 0  # session set-up, declarations, keep-alives
    assert _packets(directions[R2H], "tcp_ack") > receipts // 2  # the robot acknowledges the stream
    assert _packets(directions[H2R], "tcp_data") == 0  # every segment of the flow identified


# ---- the parser on frames built here byte by byte ----

HOST, ROBOT = "10.77.0.1", "10.77.0.2"


def _ip(src: str, dst: str, proto: int, transport: bytes, flags_offset: int = 0, ident: int = 7) -> bytes:
    def raw(address):
        return bytes(int(o) for o in address.split("."))

    header = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(transport), ident, flags_offset, 64, proto, 0,
                         raw(src), raw(dst))  # fmt: skip
    mac = b"\x02" + bytes([int(src.split(".")[-1])]) * 5
    return bytes(6) + mac + b"\x08\x00" + header + transport


def _udp(src: str, dst: str, payload: bytes, **ip) -> bytes:
    return _ip(src, dst, 17, struct.pack(">HHHH", 7411, 7410, 8 + len(payload), 0) + payload, **ip)


def _tcp(src: str, dst: str, payload: bytes = b"", flags: int = 0x10, ports=(40000, MQTT_PORT)) -> bytes:
    return _ip(src, dst, 6, struct.pack(">HHIIBBHHH", *ports, 1, 1, 5 << 4, flags, 65535, 0, 0) + payload)


def _sub(sub_id: int, body: bytes) -> bytes:
    return struct.pack("<BBH", sub_id, 0x01, len(body)) + body


def _rtps(*subs: bytes) -> bytes:
    return b"RTPS" + bytes([2, 3, 1, 16]) + bytes(12) + b"".join(subs)


def _data(writer: str) -> bytes:
    return _sub(0x15, struct.pack("<HH", 0, 16) + bytes(4) + bytes.fromhex(writer) + bytes(16))


def _heartbeat(writer: str) -> bytes:
    return _sub(0x07, bytes(4) + bytes.fromhex(writer) + bytes(20))


def _acknack(reader: str, writer: str) -> bytes:
    return _sub(0x06, bytes.fromhex(reader) + bytes.fromhex(writer) + bytes(16))


def _pcap(path, frames: list[bytes]) -> None:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, frame in enumerate(frames):
        out += struct.pack("<IIII", i, 0, len(frame), len(frame)) + frame
    path.write_bytes(out)


def _account(tmp_path, frames, ports=None):
    _pcap(tmp_path / "w.pcap", frames)
    result = wire.account(
        tmp_path / "w.pcap", [ROBOT], 2.0, ports or {MQTT_PORT: "mqtt", ZENOH_PORT: "zenoh"}
    )
    return result["directions"][wire.TO_LOCAL], result["directions"][wire.FROM_LOCAL]


def test_rtps_kinds_by_writer_and_endpoint_and_the_direction_by_address(tmp_path):
    user, user_reader, sedp = "00001203", "00001204", "000003c2"
    frames = [
        _udp(HOST, "239.255.0.1", _rtps(_sub(0x09, bytes(8)), _data("000100c2"))),  # SPDP to the group
        _udp(HOST, ROBOT, _rtps(_data(sedp), _heartbeat(sedp))),
        _udp(HOST, ROBOT, _rtps(_sub(0x09, bytes(8)), _data(user), _data(user), _heartbeat(user))),  # bundled
        _udp(HOST, ROBOT, _rtps(_heartbeat(user))),
        _udp(ROBOT, HOST, _rtps(_sub(0x0E, bytes(12)), _acknack(user_reader, user))),
        _udp(ROBOT, HOST, _rtps(_acknack("000003c7", sedp))),  # a builtin reader's ACKNACK
        _udp(ROBOT, HOST, _rtps(_data("000200c2"))),  # participant message: liveliness
        _udp(ROBOT, HOST, _rtps(_data("000201c3"))),  # DDS Security's stateless handshake
        _udp(HOST, ROBOT, _rtps(_sub(0x31, bytes(8)), _sub(0x30, bytes(40)), _sub(0x32, bytes(20)))),
        bytes(6) + b"\x02" + bytes([2]) * 5 + b"\x08\x06" + bytes(28),  # ARP from the robot's MAC
    ]
    to_robot, from_robot = _account(tmp_path, frames)
    assert {k: r["packets"] for k, r in to_robot["kinds"].items() if r["packets"]} == {
        "spdp": 1, "sedp": 1, "user_data": 1, "heartbeat_acknack": 1, "rtps_protected": 1}  # fmt: skip
    assert {k: r["packets"] for k, r in from_robot["kinds"].items() if r["packets"]} == {
        "heartbeat_acknack": 1, "discovery_reliability": 1, "liveliness": 1, "security_handshake": 1,
        "other": 1}  # fmt: skip
    assert to_robot["rtps_submessages"]["HEARTBEAT"] == 3 and to_robot["rtps_submessages"]["DATA"] == 4
    assert to_robot["data_submessages_per_packet"] == {"mean": 2.0, "max": 2}
    assert to_robot["groups"]["discovery"]["packets"] == 2
    assert to_robot["reliability_packets_per_data_packet"] == 1.0
    assert to_robot["overhead_packet_fraction"] is None  # a protected packet hides what it carries
    assert from_robot["overhead_packet_fraction"] == 1.0
    assert to_robot["kinds"]["user_data"]["packets_per_s"] == 0.5
    assert to_robot["kinds"]["user_data"]["size_bytes"]["max"] == len(frames[2])


def test_tcp_acks_tls_records_mqtt_zenoh_and_fragments(tmp_path):
    tls = bytes([22, 3, 3, 0, 4]) + bytes(4) + bytes([23, 3, 3, 0, 2]) + bytes(2)
    zenoh_push = struct.pack("<H", 6) + bytes([0x05, 0x01, 0x1D, 0, 0, 0])
    zenoh_declare = struct.pack("<H", 6) + bytes([0x05, 0x01, 0x1E, 0, 0, 0])
    zenoh_keepalive = struct.pack("<H", 1) + bytes([0x04])
    big = _rtps(_sub(0x09, bytes(8)), _data("00001203")) + bytes(100)
    frames = [
        _tcp(HOST, ROBOT),  # a pure ACK
        _tcp(HOST, ROBOT, flags=0x02),  # SYN
        _tcp(HOST, ROBOT, bytes([0x30, 5]) + b"topic"),  # MQTT PUBLISH
        _tcp(ROBOT, HOST, bytes([0x40, 2, 0, 1]), ports=(MQTT_PORT, 40000)),  # MQTT PUBACK
        _tcp(HOST, ROBOT, tls, ports=(40001, MQTT_TLS_PORT)),
        _tcp(HOST, ROBOT, bytes(30), ports=(40001, MQTT_TLS_PORT)),  # the rest of a record: still TLS
        _tcp(HOST, ROBOT, zenoh_push, ports=(ZENOH_PORT, 40002)),
        _tcp(HOST, ROBOT, zenoh_declare, ports=(ZENOH_PORT, 40002)),
        _tcp(HOST, ROBOT, zenoh_keepalive, ports=(ZENOH_PORT, 40002)),
        _tcp(HOST, ROBOT, b"hello", ports=(5000, 5001)),
        _udp(HOST, ROBOT, big, flags_offset=0x2000, ident=9),  # first fragment, more follow
        _ip(HOST, ROBOT, 17, bytes(80), flags_offset=10, ident=9),  # its second fragment
        _ip(HOST, ROBOT, 17, bytes(80), flags_offset=10, ident=10),  # a fragment without its first
    ]
    to_robot, from_robot = _account(tmp_path, frames)
    assert {k: r["packets"] for k, r in to_robot["kinds"].items() if r["packets"]} == {
        "tcp_ack": 1, "tcp_control": 1, "mqtt_publish": 1, "tls": 2, "zenoh_data": 1, "zenoh_control": 2,
        "tcp_data": 1, "user_data": 2, "ip_fragment": 1}  # fmt: skip
    assert from_robot["kinds"]["mqtt_control"]["packets"] == 1
    assert to_robot["tls_records"] == {"application_data": 1, "handshake": 1}
    assert to_robot["kinds"]["user_data"]["bytes"] == len(frames[10]) + len(frames[11])


def _footer(macs: int, declared: int | None = None) -> bytes:
    """A CryptoFooter: common MAC, the receiver-specific MACs' count (big-endian) and the MACs."""
    count = macs if declared is None else declared
    return bytes(16) + struct.pack(">I", count) + bytes(20 * macs)


def test_receiver_specific_macs_are_counted_per_footer_kind(tmp_path):
    """Each SEC_POSTFIX and SRTPS_POSTFIX by its MAC count: a message with two protected
    submessages (one MAC, none) inside a message-level footer with two, a footer that claims more
    MACs than it holds (left out), one the snap cut (left out), and a later fragment (no RTPS)."""
    sec = _sub(0x31, bytes(20)) + _sub(0x30, bytes(40))
    protected = _rtps(
        _sub(0x33, bytes(20)),
        sec,
        _sub(0x32, _footer(1)),
        sec,
        _sub(0x32, _footer(0)),
        _sub(0x34, _footer(2)),
    )
    cut = _udp(HOST, ROBOT, _rtps(sec, _sub(0x32, _footer(3))))[:-30]
    frames = [
        _udp(HOST, ROBOT, protected),
        _udp(ROBOT, HOST, _rtps(sec, _sub(0x32, _footer(1, declared=2)))),
        cut,
        _ip(HOST, ROBOT, 17, bytes(80), flags_offset=10, ident=11),
    ]
    _pcap(tmp_path / "w.pcap", frames)
    assert wire.receiver_specific_macs(tmp_path / "w.pcap") == {
        "SEC_POSTFIX": {1: 1, 0: 1},
        "SRTPS_POSTFIX": {2: 1},
    }


def test_a_trial_record_names_the_directions_from_the_robots_address(tmp_path):
    from fieldtest.linkconfig import TransportConfig

    _pcap(tmp_path / "w.pcap", [_tcp(HOST, ROBOT, bytes([0x30, 1, 0]), ports=(40000, 18830))])
    record = wire.trial_wire_record(tmp_path / "w.pcap", ROBOT, 1.0, TransportConfig(mqtt_port=18830))
    directions = record["wire"]["directions"]
    assert directions[H2R]["kinds"]["mqtt_publish"]["packets"] == 1 and directions[R2H]["packets"] == 0
