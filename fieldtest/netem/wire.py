"""On-wire accounting of a capture: packets and bytes per second by kind, per direction.

``account(pcap, local_addresses, duration_s, service_ports)`` reads a capture taken on one node's
link (the robot's in a trial) and sorts every frame into one kind, counted separately for what the
node received (``to_local``, host -> robot in a trial) and what it sent (``from_local``). Each
kind belongs to one group, so the overhead of a middleware is read from the record:

- discovery: ``spdp``, ``sedp``, ``liveliness`` (DDS participant messages), ``security_handshake``
  (DDS Security's stateless and volatile builtin endpoints), ``discovery_reliability`` (HEARTBEAT,
  ACKNACK, GAP of builtin endpoints);
- user_data: ``user_data`` (RTPS DATA/DATA_FRAG of an application writer);
- reliability: ``heartbeat_acknack`` (HEARTBEAT, ACKNACK, GAP, NACK_FRAG, HEARTBEAT_FRAG of
  application endpoints, with or without INFO_TS/INFO_DST);
- protected: ``rtps_protected`` (DDS Security hides the submessage: SEC_BODY);
- protocol: ``rtps_other`` (INFO submessages alone);
- transport: ``tcp_ack`` (a TCP segment without payload and without SYN/FIN/RST), ``tcp_control``
  (SYN, FIN, RST without payload), ``tcp_data`` (payload on a flow nothing above identifies);
- tls: ``tls`` (TLS records; record counts by content type kept apart);
- other: ``udp_other``, ``ip_fragment`` (a later fragment whose first one was not captured; others
  count as their first fragment's kind), ``other`` (ARP, IGMP, ...).

A middleware family whose processes talk over TCP (or on UDP ports of their own) adds its kinds:
its package's ``wire.py`` (``fieldtest.middleware.<family>.wire``, found by the family's name in
the catalog, plain data like its settings) declares

- ``KINDS``: each kind its traffic is sorted into -> its group above (the module says what
  each kind holds);
- ``classify(payload) -> kind``: the kind of a TCP segment on one of its ports;
- ``tcp_ports(config) -> ports``: the ports its flows use in a trial (``TransportConfig``);
- ``UDP_PORTS`` (optional): UDP port -> the kind of a datagram to or from it.

RTPS is parsed submessage by submessage (DDS-RTPS 2.5, section 9.4.5.1.1 for the ids; DDS
Security 1.1, section 7.3.6 for the protected forms), as far as the capture's snap length kept
each message. Per direction the record also holds the submessage counts, the TLS record counts,
the size distribution of each kind's packets (a bundle of retransmissions shows as data packets
far above one sample's size) and the overhead ratios.

A function over a file, so any capture (a trial's ``link.pcap``, a perf run's) is accounted alike.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from fieldtest.linkconfig import TransportConfig, family_modules

from .linktraffic import read_pcap

TO_LOCAL, FROM_LOCAL = "to_local", "from_local"

# DDS-RTPS 2.5, section 9.4.5.1.1, and DDS Security 1.1, section 7.3.6: submessage ids
SUBMESSAGE_NAMES = {
    0x01: "PAD",
    0x06: "ACKNACK",
    0x07: "HEARTBEAT",
    0x08: "GAP",
    0x09: "INFO_TS",
    0x0C: "INFO_SRC",
    0x0D: "INFO_REPLY_IP4",
    0x0E: "INFO_DST",
    0x0F: "INFO_REPLY",
    0x12: "NACK_FRAG",
    0x13: "HEARTBEAT_FRAG",
    0x15: "DATA",
    0x16: "DATA_FRAG",
    0x30: "SEC_BODY",
    0x31: "SEC_PREFIX",
    0x32: "SEC_POSTFIX",
    0x33: "SRTPS_PREFIX",
    0x34: "SRTPS_POSTFIX",
}
DATA_IDS = {0x15, 0x16}
RELIABILITY_IDS = {0x06, 0x07, 0x08, 0x12, 0x13}
SEC_BODY = 0x30
SEC_POSTFIX, SRTPS_POSTFIX = 0x32, 0x34
# DDS Security 1.1, 7.3.6 (CryptoFooter): the common MAC, then the receiver-specific MACs, a
# sequence (big-endian length) of key id + MAC (CycloneDDS src/security/builtin_plugins/
# cryptographic/src/crypto_transform.c, read_secure_postfix)
COMMON_MAC_BYTES, RECEIVER_MAC_BYTES = 16, 20

# DDS-RTPS 2.5, section 9.3.1.3, and DDS Security 1.1, section 7.4.* : builtin writers' entity ids
SPDP_WRITERS = {bytes.fromhex("000100c2"), bytes.fromhex("ff0101c2")}
SEDP_WRITERS = {bytes.fromhex(h) for h in ("000002c2", "000003c2", "000004c2", "ff0003c2", "ff0004c2")}
LIVELINESS_WRITERS = {bytes.fromhex("000200c2"), bytes.fromhex("ff0200c2")}
HANDSHAKE_WRITERS = {bytes.fromhex("000201c3"), bytes.fromhex("ff0202c3")}
BUILTIN_KIND = 0xC0  # entityKind's two high bits: builtin (section 9.3.1.2)

# TLS 1.2/1.3 record content types (RFC 8446, section 5.1)
TLS_CONTENT_TYPES = {
    20: "change_cipher_spec",
    21: "alert",
    22: "handshake",
    23: "application_data",
    24: "heartbeat",
}

# The kinds of RTPS, TCP, TLS and IP by group; each family's wire form adds its own (_with_families)
PROTOCOL_GROUPS = {
    "discovery": ("spdp", "sedp", "liveliness", "security_handshake", "discovery_reliability"),
    "user_data": ("user_data",),
    "reliability": ("heartbeat_acknack",),
    "protected": ("rtps_protected",),
    "protocol": ("rtps_other",),
    "transport": ("tcp_ack", "tcp_control", "tcp_data"),
    "tls": ("tls",),
    "other": ("udp_other", "ip_fragment", "other"),
}
# family name -> its wire form (fieldtest.middleware.<family>.wire), for the families that have one
FAMILY_WIRE: dict[str, ModuleType] = family_modules("wire")


def _with_families(groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """``groups`` with each family's kinds added to the groups it names (a group it names that
    ``groups`` lacks is an error: the record's groups are fixed)."""
    out = {group: list(kinds) for group, kinds in groups.items()}
    for form in FAMILY_WIRE.values():
        for kind, group in form.KINDS.items():
            if group not in out:
                raise ValueError(f"{form.__name__}: kind {kind!r} in unknown group {group!r}")
            out[group].append(kind)
    return {group: tuple(kinds) for group, kinds in out.items()}


GROUPS = _with_families(PROTOCOL_GROUPS)
KINDS = tuple(kind for kinds in GROUPS.values() for kind in kinds)
GROUP_OF = {kind: group for group, kinds in GROUPS.items() for kind in kinds}


@dataclass
class _Packet:
    kind: str
    src: str | None = None
    submessages: list[str] = field(default_factory=list)
    tls_records: list[str] = field(default_factory=list)
    data_submessages: int = 0


def _entity(body: bytes, start: int) -> bytes:
    return body[start : start + 4]


def _builtin(entity: bytes) -> bool:
    return len(entity) == 4 and entity[3] & BUILTIN_KIND == BUILTIN_KIND


def _data_kind(writer: bytes) -> str:
    if writer in SPDP_WRITERS:
        return "spdp"
    if writer in SEDP_WRITERS:
        return "sedp"
    if writer in LIVELINESS_WRITERS:
        return "liveliness"
    if writer in HANDSHAKE_WRITERS:
        return "security_handshake"
    return "user_data"


def rtps_submessages(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """(id, body) of each submessage of one RTPS message, as far as the snap kept them."""
    offset = 20  # after the RTPS header
    while offset + 4 <= len(payload):
        sub_id, flags = payload[offset], payload[offset + 1]
        length = int.from_bytes(payload[offset + 2 : offset + 4], "little" if flags & 1 else "big")
        yield sub_id, payload[offset + 4 : offset + 4 + length] if length else payload[offset + 4 :]
        if length == 0:  # the last submessage extends to the end of the message
            break
        offset += 4 + length


def rtps_packet(payload: bytes) -> _Packet:
    """One RTPS message: its kind and its submessages, as far as the snap kept them."""
    packet = _Packet("rtps_other")
    data_kinds: list[str] = []
    user_reliability = builtin_reliability = hidden = False
    for sub_id, body in rtps_submessages(payload):
        packet.submessages.append(SUBMESSAGE_NAMES.get(sub_id, f"0x{sub_id:02x}"))
        if sub_id in DATA_IDS:
            packet.data_submessages += 1
            if len(body) >= 12:  # extraFlags, octetsToInlineQos, readerId, then writerId
                data_kinds.append(_data_kind(_entity(body, 8)))
        elif sub_id in RELIABILITY_IDS and len(body) >= 8:  # readerId, writerId
            builtin = _builtin(_entity(body, 0)) or _builtin(_entity(body, 4))
            builtin_reliability |= builtin
            user_reliability |= not builtin
        hidden |= sub_id == SEC_BODY
    if data_kinds:
        packet.kind = "user_data" if "user_data" in data_kinds else data_kinds[0]
    elif hidden:
        packet.kind = "rtps_protected"
    elif user_reliability:
        packet.kind = "heartbeat_acknack"
    elif builtin_reliability:
        packet.kind = "discovery_reliability"
    return packet


def _receiver_mac_count(body: bytes) -> int | None:
    """The number of receiver-specific MACs a postfix's CryptoFooter announces (None: not kept, or
    more than the submessage holds)."""
    count_end = COMMON_MAC_BYTES + 4
    if len(body) < count_end:
        return None
    count = int.from_bytes(body[COMMON_MAC_BYTES:count_end], "big")
    return count if count_end + count * RECEIVER_MAC_BYTES <= len(body) else None


def _rtps_datagrams(path: str | Path) -> Iterator[bytes]:
    """The RTPS payload of every IPv4 UDP datagram (first fragment) of an Ethernet capture."""
    for frame in read_pcap(path):
        data = frame.data
        if len(data) < 34 or data[12:14] != b"\x08\x00":
            continue
        ip = data[14:]
        if ip[9] != 17 or int.from_bytes(ip[6:8], "big") & 0x1FFF:
            continue
        payload = ip[(ip[0] & 0x0F) * 4 + 8 :]
        if payload[:4] == b"RTPS":
            yield payload


def receiver_specific_macs(path: str | Path) -> dict[str, dict[int, int]]:
    """How many receiver-specific MACs the postfixes of a capture's RTPS messages carry:
    ``{"SEC_POSTFIX": {macs: postfixes}, "SRTPS_POSTFIX": {...}}``, submessage protection and
    message protection apart. A ``*_WITH_ORIGIN_AUTHENTICATION`` kind adds one MAC per receiver,
    keyed for that receiver alone; the other kinds leave the sequence empty."""
    counts: dict[str, dict[int, int]] = {SUBMESSAGE_NAMES[i]: {} for i in (SEC_POSTFIX, SRTPS_POSTFIX)}
    for payload in _rtps_datagrams(path):
        for sub_id, body in rtps_submessages(payload):
            if sub_id in (SEC_POSTFIX, SRTPS_POSTFIX) and (n := _receiver_mac_count(body)) is not None:
                row = counts[SUBMESSAGE_NAMES[sub_id]]
                row[n] = row.get(n, 0) + 1
    return counts


def tls_records(payload: bytes) -> list[str] | None:
    """Content types of the TLS records a segment starts with (None: it does not start with one)."""
    found, offset = [], 0
    while offset + 5 <= len(payload):
        content, major, minor = payload[offset], payload[offset + 1], payload[offset + 2]
        if content not in TLS_CONTENT_TYPES or major != 3 or minor > 4:
            break
        found.append(TLS_CONTENT_TYPES[content])
        offset += 5 + int.from_bytes(payload[offset + 3 : offset + 5], "big")
    return found or None


# the protocol a service port speaks (a family's name) -> the classifier of its TCP payload
SERVICE_CLASSIFIERS: dict[str, Callable[[bytes], str]] = {
    name: form.classify for name, form in FAMILY_WIRE.items()
}
# UDP port -> the kind of a datagram to or from it (the ports a family reserves for itself)
UDP_PORT_KINDS: dict[int, str] = {
    port: kind for form in FAMILY_WIRE.values() for port, kind in getattr(form, "UDP_PORTS", {}).items()
}


class _Flows:
    """What each TCP flow was found to carry, so continuation segments keep their flow's kind."""

    def __init__(self, service_ports: Mapping[int, str]):
        self.service_ports = dict(service_ports)
        self.tls: set[tuple] = set()

    def tcp_packet(self, flow: tuple, ports: tuple[int, int], flags: int, payload: bytes) -> _Packet:
        if not payload:
            return _Packet("tcp_control" if flags & 0x07 else "tcp_ack")  # FIN, SYN, RST
        records = tls_records(payload)
        if records is not None:
            self.tls.add(flow)
            return _Packet("tls", tls_records=records)
        if flow in self.tls:
            return _Packet("tls")  # the rest of a record that started in an earlier segment
        service = self.service_ports.get(ports[0]) or self.service_ports.get(ports[1])
        classify = SERVICE_CLASSIFIERS.get(service) if service is not None else None
        return _Packet(classify(payload) if classify else "tcp_data")


def _ip_packet(ip: bytes, flows: _Flows, fragments: dict[tuple, str]) -> _Packet:
    src, dst = ip[12:16], ip[16:20]
    key = (src, dst, ip[4:6], ip[9])
    offset = int.from_bytes(ip[6:8], "big") & 0x1FFF
    if offset:  # a later fragment: no transport header, the first fragment's kind
        return _Packet(fragments.get(key, "ip_fragment"))
    header, proto = (ip[0] & 0x0F) * 4, ip[9]
    segment = ip[header:]
    if proto == 17 and len(segment) >= 8:
        payload = segment[8:]
        ports = (int.from_bytes(segment[0:2], "big"), int.from_bytes(segment[2:4], "big"))
        if payload[:4] == b"RTPS":
            packet = rtps_packet(payload)
        else:
            packet = _Packet(_udp_port_kind(ports))
    elif proto == 6 and len(segment) >= 20:
        ports = (int.from_bytes(segment[0:2], "big"), int.from_bytes(segment[2:4], "big"))
        data_offset = (segment[12] >> 4) * 4
        flow = (src, dst, *ports)
        packet = flows.tcp_packet(flow, ports, segment[13], segment[data_offset:])
    else:
        packet = _Packet("other")
    if int.from_bytes(ip[6:8], "big") & 0x2000:  # more fragments follow
        fragments[key] = packet.kind
    return packet


def _udp_port_kind(ports: tuple[int, int]) -> str:
    for port in ports:
        if port in UDP_PORT_KINDS:
            return UDP_PORT_KINDS[port]
    return "udp_other"


def _new_direction() -> dict[str, Any]:
    return {
        "kinds": {kind: {"packets": 0, "bytes": 0} for kind in KINDS},
        "sizes": {kind: [] for kind in KINDS},
        "rtps_submessages": {},
        "tls_records": {},
        "data_submessages_per_packet": [],
    }


def account(
    path: str | Path,
    local_addresses: Iterable[str],
    duration_s: float,
    service_ports: Mapping[int, str] | None = None,
    direction_names: tuple[str, str] = (TO_LOCAL, FROM_LOCAL),
) -> dict[str, Any]:
    """Packets and bytes (on the wire, Ethernet header included) and their rates per second, by
    kind and group, for each direction of the link ``path`` was captured on. ``local_addresses``
    are the capturing node's IPv4 addresses; ``service_ports`` names TCP ports by the family whose
    protocol they carry (a key of ``SERVICE_CLASSIFIERS``); ``direction_names`` name (what the
    node received, what it sent) in the result."""
    local = {ipaddress.ip_address(a).packed for a in local_addresses}
    flows, local_macs = _Flows(service_ports or {}), set()
    fragments: dict[tuple, str] = {}
    directions = {TO_LOCAL: _new_direction(), FROM_LOCAL: _new_direction()}
    pending_non_ip = []
    for frame in read_pcap(path):
        data = frame.data
        if len(data) >= 34 and data[12:14] == b"\x08\x00":
            ip = data[14:]
            outgoing = ip[12:16] in local
            if outgoing:
                local_macs.add(data[6:12])
            packet = _ip_packet(ip, flows, fragments)
        else:  # ARP and the like: their direction from the sender's MAC, once the local ones are known
            pending_non_ip.append(frame)
            continue
        _count(directions[FROM_LOCAL if outgoing else TO_LOCAL], packet, frame.wire_len)
    for frame in pending_non_ip:
        outgoing = frame.data[6:12] in local_macs
        _count(directions[FROM_LOCAL if outgoing else TO_LOCAL], _Packet("other"), frame.wire_len)
    per_s = max(duration_s, 1e-9)
    return {
        "duration_s": round(duration_s, 3),
        "directions": {
            direction_names[0]: _summary(directions[TO_LOCAL], per_s),
            direction_names[1]: _summary(directions[FROM_LOCAL], per_s),
        },
    }


def _count(direction: dict[str, Any], packet: _Packet, wire_len: int) -> None:
    row = direction["kinds"][packet.kind]
    row["packets"] += 1
    row["bytes"] += wire_len
    direction["sizes"][packet.kind].append(wire_len)
    for name in packet.submessages:
        direction["rtps_submessages"][name] = direction["rtps_submessages"].get(name, 0) + 1
    for name in packet.tls_records:
        direction["tls_records"][name] = direction["tls_records"].get(name, 0) + 1
    if packet.kind == "user_data":
        direction["data_submessages_per_packet"].append(packet.data_submessages)


def _sizes(values: list[int]) -> dict[str, int]:
    ordered = sorted(values)
    n = len(ordered)
    return {"median": ordered[n // 2], "p95": ordered[min(n - 1, (95 * n) // 100)], "max": ordered[-1]}


def _summary(direction: dict[str, Any], per_s: float) -> dict[str, Any]:
    kinds = direction["kinds"]
    for kind, row in kinds.items():
        row["packets_per_s"] = round(row["packets"] / per_s, 3)
        row["bytes_per_s"] = round(row["bytes"] / per_s, 1)
        if sizes := direction["sizes"][kind]:
            row["size_bytes"] = _sizes(sizes)
    groups = {}
    for group, members in GROUPS.items():
        packets = sum(kinds[k]["packets"] for k in members)
        size = sum(kinds[k]["bytes"] for k in members)
        groups[group] = {
            "packets": packets,
            "bytes": size,
            "packets_per_s": round(packets / per_s, 3),
            "bytes_per_s": round(size / per_s, 1),
        }
    total = sum(g["packets"] for g in groups.values())
    hidden = groups["tls"]["packets"] + groups["protected"]["packets"]
    data = groups["user_data"]["packets"]
    per_packet = direction["data_submessages_per_packet"]
    return {
        "kinds": kinds,
        "groups": groups,
        "packets": total,
        "bytes": sum(g["bytes"] for g in groups.values()),
        # Fernandez et al.'s overhead: packets that carry no user sample, as a share of all (None
        # where TLS or DDS Security hides which packets carry samples)
        "overhead_packet_fraction": None if not total or hidden else round((total - data) / total, 4),
        "reliability_packets_per_data_packet": None
        if not data
        else round(groups["reliability"]["packets"] / data, 4),
        "rtps_submessages": dict(sorted(direction["rtps_submessages"].items())),
        "tls_records": dict(sorted(direction["tls_records"].items())),
        "data_submessages_per_packet": None
        if not per_packet
        else {"mean": round(sum(per_packet) / len(per_packet), 3), "max": max(per_packet)},
    }


HOST_TO_ROBOT, ROBOT_TO_HOST = "host_to_robot", "robot_to_host"


def trial_service_ports(transport: TransportConfig) -> dict[int, str]:
    """TCP port -> the family whose flows use it in the trial ``transport`` describes (every family
    with a wire form names its ports, whatever the trial's middleware)."""
    return {port: name for name, form in FAMILY_WIRE.items() for port in form.tcp_ports(transport)}


def trial_wire_record(
    path: str | Path, robot_address: str, duration_s: float, transport: TransportConfig
) -> dict[str, Any]:
    """A trial's capture on the robot's link, per direction (``wire`` in ``outcome.link_traffic``):
    what the robot received is host -> robot, what it sent robot -> host. ``transport`` is the
    trial's TransportConfig, whose family settings name the TCP flows (``trial_service_ports``)."""
    ports = trial_service_ports(transport)
    wire = account(path, [robot_address], duration_s, ports, (HOST_TO_ROBOT, ROBOT_TO_HOST))
    return {"wire": wire}
