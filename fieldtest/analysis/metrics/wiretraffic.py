"""The link's traffic per direction and kind in metrics.json, the trial report and compare.

The trial record's ``outcome.link_traffic.wire`` (fieldtest.netem.wire) holds every kind's counts;
``wire_metrics`` keeps the rates, groups, overhead ratios, submessage and TLS record counts and
the data packets' sizes, and ``wire_values`` the figures compare sets side by side.
"""

from __future__ import annotations

from typing import Any

from fieldtest.analysis.metrics.schema import Wire, WireDirection

HOST_TO_ROBOT, ROBOT_TO_HOST = "host_to_robot", "robot_to_host"
DIRECTIONS = ((HOST_TO_ROBOT, "host -> robot"), (ROBOT_TO_HOST, "robot -> host"))
KEPT = ("overhead_packet_fraction", "reliability_packets_per_data_packet", "packets", "bytes")
KEPT_MAPS = ("groups", "rtps_submessages", "tls_records", "data_submessages_per_packet")


def wire_metrics(link_traffic: dict[str, Any]) -> Wire | None:
    """The per-direction figures of a trial's capture (None without one)."""
    wire = link_traffic.get("wire") if link_traffic else None
    if not wire:
        return None
    return Wire(
        duration_s=wire["duration_s"],
        node=link_traffic.get("node"),
        host_to_robot=_direction(wire["directions"][HOST_TO_ROBOT]),
        robot_to_host=_direction(wire["directions"][ROBOT_TO_HOST]),
    )


def _direction(recorded: dict[str, Any]) -> WireDirection:
    """One direction as the record holds it (fieldtest.netem.wire), the kinds seen without their
    packet and byte counts."""
    kinds = {
        kind: {k: v for k, v in counts.items() if k != "packets" and k != "bytes"}
        for kind, counts in recorded["kinds"].items()
        if counts["packets"]
    }
    return WireDirection.model_validate({key: recorded[key] for key in KEPT + KEPT_MAPS} | {"kinds": kinds})


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100.0


def wire_values(wire: Wire | None) -> dict[str, float | None]:
    """compare's link figures: kB/s and the overhead share (% of packets) each way, and the
    reliability packets per data packet host -> robot (None without a capture)."""
    if wire is None:
        return dict.fromkeys(
            ("wire_h2r_kBps", "wire_r2h_kBps", "overhead_h2r", "overhead_r2h", "reliability_h2r")
        )
    h2r, r2h = wire.host_to_robot, wire.robot_to_host

    def kbps(row: WireDirection) -> float:
        return sum(g.bytes_per_s for g in row.groups.values()) / 1000.0

    return {
        "wire_h2r_kBps": kbps(h2r),
        "wire_r2h_kBps": kbps(r2h),
        "overhead_h2r": _percent(h2r.overhead_packet_fraction),
        "overhead_r2h": _percent(r2h.overhead_packet_fraction),
        "reliability_h2r": h2r.reliability_packets_per_data_packet,
    }


def _fmt(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "n/a" if value is None else f"{value * scale:.{digits}f}"


def wire_lines(wire: Wire | None) -> list[str]:
    """The report's "Link traffic" section: one table of groups per direction, then the details."""
    if wire is None:
        return []
    h2r, r2h = wire.host_to_robot, wire.robot_to_host
    lines = [
        "## Link traffic",
        "",
        f"Captured on the {wire.node or 'robot'}'s link for {wire.duration_s:.1f} s "
        '(docs/analysis.md, "Link traffic"); packets/s and bytes/s per direction.',
        "",
        "| group | host -> robot pkt/s | host -> robot B/s | robot -> host pkt/s | robot -> host B/s |",
        "|---|---|---|---|---|",
    ]
    for group in h2r.groups:
        a, b = h2r.groups[group], r2h.groups[group]
        if a.packets or b.packets:
            lines.append(f"| {group} | {a.packets_per_s:.1f} | {a.bytes_per_s:.0f} | "
                         f"{b.packets_per_s:.1f} | {b.bytes_per_s:.0f} |")  # fmt: skip
    lines.append("")
    for row, title in ((h2r, DIRECTIONS[0][1]), (r2h, DIRECTIONS[1][1])):
        kinds = ", ".join(f"{kind} {k.packets_per_s:.1f}/s" for kind, k in row.kinds.items())
        lines.append(f"- {title}: {kinds or 'nothing'}")
        lines.append(
            f"  - overhead {_fmt(row.overhead_packet_fraction, 1, 100.0)} % of packets; "
            f"reliability packets per data packet {_fmt(row.reliability_packets_per_data_packet, 2)}"
        )
        if data := row.kinds.get("user_data"):
            per_packet, sizes = row.data_submessages_per_packet, data.size_bytes
            size_median, size_max = (sizes.median, sizes.max) if sizes else (None, None)
            mean, most = (per_packet.mean, per_packet.max) if per_packet else (None, None)
            lines.append(
                f"  - RTPS data packets: median {size_median} B, max {size_max} B, "
                f"DATA submessages per packet mean {mean} max {most}"
            )
        if row.rtps_submessages:
            subs = ", ".join(f"{k} {v}" for k, v in row.rtps_submessages.items())
            lines.append(f"  - RTPS submessages: {subs}")
        if row.tls_records:
            lines.append("  - TLS records: " + ", ".join(f"{k} {v}" for k, v in row.tls_records.items()))
    return lines + [""]
