"""Zenoh on the wire: how ``fieldtest.netem.wire`` sorts a Zenoh flow's segments into kinds.

Plain like the family's settings (no middleware library), so any capture can be accounted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fieldtest.middleware.zenoh.settings import Settings

if TYPE_CHECKING:
    from fieldtest.linkconfig import TransportConfig

# kind -> its group in the accounting (fieldtest.netem.wire.GROUPS): scouting datagrams; a FRAME or
# FRAGMENT whose first network message is PUSH, REQUEST or RESPONSE; the rest (INIT, OPEN, CLOSE,
# KEEP_ALIVE, JOIN, DECLARE, INTEREST)
KINDS = {"zenoh_scouting": "discovery", "zenoh_data": "user_data", "zenoh_control": "protocol"}
SCOUTING_PORT = 7446  # zenoh scouting (multicast) default
UDP_PORTS = {SCOUTING_PORT: "zenoh_scouting"}

# Zenoh 1.x transport and network message ids (the low 5 bits of a header; zenoh-pico
# include/zenoh-pico/protocol/definitions/{transport,network}.h)
FRAME, FRAGMENT = 0x05, 0x06
NETWORK_DATA = {0x1D, 0x1C, 0x1B, 0x1A}  # PUSH, REQUEST, RESPONSE, RESPONSE_FINAL


def tcp_ports(config: TransportConfig) -> tuple[int, ...]:
    """The TCP ports a trial's Zenoh sessions use."""
    return (config.settings(Settings).port,)


def classify(payload: bytes) -> str:
    """A Zenoh TCP segment: 2-byte little-endian batch length, then transport messages."""
    if len(payload) < 3:
        return "zenoh_control"
    header = payload[2]
    if header & 0x1F not in (FRAME, FRAGMENT):
        return "zenoh_control"  # INIT, OPEN, CLOSE, KEEP_ALIVE, JOIN, OAM
    if header & 0x1F == FRAGMENT:
        return "zenoh_data"  # only payloads too large for one batch are fragmented
    offset = 3
    while offset < len(payload) and payload[offset] & 0x80:  # the sequence number (LEB128)
        offset += 1
    offset += 1
    if header & 0x80:  # extensions follow (Z flag): skip each, as its encoding says
        offset = _skip_extensions(payload, offset)
    if offset >= len(payload):
        return "zenoh_data"
    return "zenoh_data" if payload[offset] & 0x1F in NETWORK_DATA else "zenoh_control"


def _skip_extensions(payload: bytes, offset: int) -> int:
    more = True
    while more and offset < len(payload):
        ext = payload[offset]
        more, encoding = bool(ext & 0x80), ext & 0x60
        offset += 1
        if encoding == 0x20:  # a varint
            while offset < len(payload) and payload[offset] & 0x80:
                offset += 1
            offset += 1
        elif encoding == 0x40:  # a length-prefixed buffer
            length, shift = 0, 0
            while offset < len(payload):
                byte = payload[offset]
                length |= (byte & 0x7F) << shift
                offset, shift = offset + 1, shift + 7
                if not byte & 0x80:
                    break
            offset += length
    return offset
