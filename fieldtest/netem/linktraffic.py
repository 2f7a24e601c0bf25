"""What crosses a node's emulated link during a trial: packets and bytes per second by kind.

``LinkCapture`` runs tcpdump on the node's interface inside its namespace for the trial, keeping
the first ``SNAP_BYTES`` of each frame (enough for the IP, UDP and RTPS headers and the first
submessages) and at most ``MAX_PACKETS`` frames, so the capture stays bounded and cheap.
``summarize`` reads the pcap file with a small reader (classic pcap, Ethernet frames) and sorts
each frame into one kind:

- ``spdp`` / ``sedp``: RTPS with a DATA from the SPDP participant writer or the SEDP publication /
  subscription writers (DDS discovery),
- ``user_data``: RTPS with a DATA from any other writer,
- ``heartbeat_acknack``: RTPS with only HEARTBEAT, ACKNACK, GAP and their fragment forms,
- ``rtps_protected``: RTPS whose submessages or whole message DDS Security protects (SEC_PREFIX,
  SRTPS_PREFIX), so their kind is hidden,
- ``rtps_other``: other RTPS (e.g. INFO submessages alone, or cut off before a known one),
- ``ip_fragment``: the second and later fragments of a datagram larger than the link's MTU,
- ``udp_other``, ``tcp``, ``other`` (ARP, IGMP, ...).
"""

from __future__ import annotations

import ipaddress
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldtest.errors import FieldtestError

CAPTURE_FILE = "link.pcap"  # in the trial directory
SNAP_BYTES = 256
MAX_PACKETS = 100_000  # about 27 MB of capture at most
READY_TIMEOUT_S = 5.0
# stop() lets tcpdump write out what its ring still holds: until the file has not grown for
# DRAIN_QUIET_S, at most DRAIN_TIMEOUT_S
DRAIN_QUIET_S, DRAIN_TIMEOUT_S = 0.2, 2.0

# DDS-RTPS 2.3, section 9.4.5.1.1: submessage ids
DATA, DATA_FRAG = 0x15, 0x16
ACKNACK, HEARTBEAT, GAP, NACK_FRAG, HEARTBEAT_FRAG = 0x06, 0x07, 0x08, 0x12, 0x13
RELIABILITY_SUBMESSAGES = {ACKNACK, HEARTBEAT, GAP, NACK_FRAG, HEARTBEAT_FRAG}
# DDS Security 1.1, section 7.3.6: protected submessages and messages
SEC_PREFIX, SRTPS_PREFIX = 0x31, 0x33
# DDS-RTPS 2.3, section 9.3.1.3: the builtin discovery writers' entity ids
SPDP_WRITER = bytes.fromhex("000100c2")
SEDP_WRITERS = {bytes.fromhex("000003c2"), bytes.fromhex("000004c2")}
KINDS = (
    "spdp",
    "sedp",
    "user_data",
    "heartbeat_acknack",
    "rtps_protected",
    "rtps_other",
    "ip_fragment",
    "udp_other",
    "tcp",
    "other",
)
MULTICAST = ipaddress.ip_network("224.0.0.0/4")


class CaptureError(FieldtestError, RuntimeError):
    """The link capture could not start or its file cannot be read."""


@dataclass(frozen=True)
class Frame:
    """One captured Ethernet frame: its length on the wire and what the snap kept of it."""

    time_s: float
    wire_len: int
    data: bytes


def read_pcap(path: str | Path) -> Iterator[Frame]:
    """Frames of a classic pcap file (micro- or nanosecond, either byte order)."""
    raw = Path(path).read_bytes()
    if len(raw) < 24:
        raise CaptureError(f"{path}: not a pcap file (too short)")
    magic = raw[:4]
    formats = {
        b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
        b"\xa1\xb2\xc3\xd4": (">", 1e-6),
        b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
        b"\xa1\xb2\x3c\x4d": (">", 1e-9),
    }
    if magic not in formats:
        raise CaptureError(f"{path}: not a pcap file (magic {magic.hex()})")
    order, tick = formats[magic]
    offset = 24
    while offset + 16 <= len(raw):
        sec, frac, caught, wire = struct.unpack_from(order + "IIII", raw, offset)
        offset += 16
        yield Frame(sec + frac * tick, wire, raw[offset : offset + caught])
        offset += caught


def rtps_kind(payload: bytes) -> str:
    """The kind of one RTPS message, from its submessages (as far as the snap kept them)."""
    offset, reliability = 20, False  # after the RTPS header
    while offset + 4 <= len(payload):
        sub_id, flags = payload[offset], payload[offset + 1]
        length = int.from_bytes(payload[offset + 2 : offset + 4], "little" if flags & 1 else "big")
        body = payload[offset + 4 :]
        if sub_id in (DATA, DATA_FRAG) and len(body) >= 12:
            writer = body[8:12]  # after extraFlags, octetsToInlineQos and readerId
            if writer == SPDP_WRITER:
                return "spdp"
            return "sedp" if writer in SEDP_WRITERS else "user_data"
        if sub_id in (SEC_PREFIX, SRTPS_PREFIX):
            return "rtps_protected"
        reliability |= sub_id in RELIABILITY_SUBMESSAGES
        if length == 0:  # the last submessage extends to the end of the message
            break
        offset += 4 + length
    return "heartbeat_acknack" if reliability else "rtps_other"


def frame_kind(data: bytes) -> tuple[str, bool]:
    """(kind, sent to a multicast group) of one Ethernet frame."""
    if len(data) < 34 or data[12:14] != b"\x08\x00":  # IPv4 only (the twin disables IPv6)
        return "other", False
    ip = data[14:]
    header = (ip[0] & 0x0F) * 4
    multicast = ipaddress.ip_address(ip[16:20]) in MULTICAST
    if _fragment_offset(ip):  # no transport header of its own
        return "ip_fragment", multicast
    proto = ip[9]
    if proto == 6:
        return "tcp", multicast
    if proto != 17:
        return "other", multicast
    payload = ip[header + 8 :]
    if payload[:4] == b"RTPS":
        return rtps_kind(payload), multicast
    return "udp_other", multicast


def _fragment_offset(ip: bytes) -> int:
    return int.from_bytes(ip[6:8], "big") & 0x1FFF


def udp_destinations(path: str | Path) -> Iterator[tuple[str, int]]:
    """(destination address, port) of every captured IPv4 UDP datagram (its first fragment)."""
    for frame in read_pcap(path):
        data = frame.data
        ipv4_udp = len(data) >= 38 and data[12:14] == b"\x08\x00" and data[23] == 17
        if ipv4_udp and not _fragment_offset(data[14:]):
            header = (data[14] & 0x0F) * 4
            port = int.from_bytes(data[14 + header + 2 : 14 + header + 4], "big")
            yield str(ipaddress.ip_address(data[30:34])), port


def summarize(path: str | Path, duration_s: float) -> dict[str, Any]:
    """Packets, bytes (on the wire, Ethernet header included) and their rates per second by kind,
    with the multicast share of each, over ``duration_s`` seconds of capture."""
    counts: dict[str, dict[str, float]] = {
        kind: {"packets": 0, "bytes": 0, "multicast_packets": 0} for kind in KINDS
    }
    for frame in read_pcap(path):
        kind, multicast = frame_kind(frame.data)
        row = counts[kind]
        row["packets"] += 1
        row["bytes"] += frame.wire_len
        row["multicast_packets"] += multicast
    per_s = max(duration_s, 1e-9)
    for row in counts.values():
        row["packets_per_s"] = round(row["packets"] / per_s, 3)
        row["bytes_per_s"] = round(row["bytes"] / per_s, 1)
    return {"duration_s": round(duration_s, 3), "kinds": counts}


class LinkCapture:
    """tcpdump on ``iface`` inside a namespace, from ``start()`` until ``stop()`` (which summarizes)."""

    def __init__(self, command_prefix: list[str], iface: str, path: Path, snap_bytes: int = SNAP_BYTES):
        self.argv = [*command_prefix, "tcpdump", "-i", iface, "-n", "-s", str(snap_bytes)]
        # Immediate mode: without it libpcap's TPACKET_V3 ring hands packets over a block at a
        # time (a block closes when full or after tcpdump's 1 s buffer timeout), and on SIGTERM
        # the open block is lost: the last second of the capture, or all of a short exchange.
        # -U writes each packet as it arrives, so the file's growth shows tcpdump's progress.
        self.argv += ["--immediate-mode", "-U", "-c", str(MAX_PACKETS), "-Z", "root", "-w", str(path)]
        self.path = path
        self._proc: subprocess.Popen | None = None
        self._started = 0.0

    def start(self) -> None:
        if shutil.which("tcpdump") is None:
            raise CaptureError("tcpdump is missing (tools/install.sh installs it)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        proc = self._proc = subprocess.Popen(self.argv, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None  # piped above
        # tcpdump says "listening on ..." once its socket is open: nothing before it is missed
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = proc.stderr.readline()
        while "listening on" not in line:
            if not line or time.monotonic() > deadline:
                proc.kill()
                raise CaptureError(f"tcpdump did not start: {line.strip() or 'no output'}")
            line = proc.stderr.readline()
        self._started = time.monotonic()

    def stop(self) -> dict[str, Any]:
        """End the capture and return its summary, with tcpdump's own drop counter."""
        if self._proc is None:
            return {}
        duration = time.monotonic() - self._started
        self._drain(self._proc)
        self._proc.terminate()
        try:
            _, err = self._proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        self._proc = None
        summary = summarize(self.path, duration)
        for line in err.splitlines():
            if "dropped by kernel" in line:
                summary["dropped_by_kernel"] = int(line.split()[0])
        summary.update({"file": self.path.name, "snap_bytes": SNAP_BYTES, "max_packets": MAX_PACKETS})
        return summary

    def _drain(self, proc: subprocess.Popen) -> None:
        """Wait until tcpdump has written what it had not yet read when stop() was called (on
        SIGTERM it drops what is still in its ring)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        size, quiet_since = -1, time.monotonic()
        while time.monotonic() < deadline and proc.poll() is None:
            now_size = self.path.stat().st_size if self.path.exists() else 0
            if now_size != size:
                size, quiet_since = now_size, time.monotonic()
            elif time.monotonic() - quiet_since >= DRAIN_QUIET_S:
                return
            time.sleep(0.05)
