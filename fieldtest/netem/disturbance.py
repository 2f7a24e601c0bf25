"""How much of a measured link delay the machine may have added, from figures taken in the same run.

A probe's round trip over an emulated link is the configured delay plus what each process on the
path added by waking late: the forwarder, once per direction (its own lateness against each
frame's due time, which it records), and the two probe endpoints (the reference timer of
``fieldtest.machine.MachineMonitor`` stands in for them: ordinary processes on the same machine).
A forwarder that applies the wrong delay cannot hide in this: its lateness is measured against
its own due times, so only scheduling shows up there.

The bound for a median: if each of k added terms stays at or under its 90th percentile with
probability >= 0.9, all of them do with probability >= 1 - k/10 (union bound), which is >= 0.5 for
k <= 5; so the median of the sum is at most the sum of the 90th percentiles. Tests judge a
measured median against ``configured + tolerance + allowance``; the lower side stays strict (the
machine only ever adds delay).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fieldtest.machine import MachineReport


@dataclass(frozen=True)
class DelayAllowance:
    """Upper allowances (ms) for medians of a probe's round trip and each one-way delay."""

    rtt_ms: float
    ab_ms: float  # node a -> node b: the downlink of node b's link
    ba_ms: float
    detail: str

    def __str__(self) -> str:
        return self.detail


def _p90_ms(direction: dict[str, Any] | None) -> float:
    if not direction:
        return 0.0
    return direction.get("late_p90_us", direction.get("late_p99_us", 0)) / 1000.0


def probe_allowance(machine: MachineReport, forwarder: dict[str, Any] | None) -> DelayAllowance:
    """Allowance for a udp-echo probe from a node to the node behind ``forwarder`` (its stats, as
    ``Topology.link_stats()[node]``; None for a plain veth). a2b is that node's uplink."""
    wake_ms = machine["timer_late_p90_ms"]
    up_ms, down_ms = _p90_ms((forwarder or {}).get("a2b")), _p90_ms((forwarder or {}).get("b2a"))
    # a -> b: through the node's downlink, then the echo server wakes; b -> a: uplink, client wakes
    ab, ba = down_ms + wake_ms, up_ms + wake_ms
    detail = (
        f"machine allowance: forwarder late p90 down {down_ms:.2f} / up {up_ms:.2f} ms, "
        f"endpoint wake-up p90 {wake_ms:.2f} ms; steal {machine['steal_pct']:.1f} % "
        f"(max {machine['steal_max_pct']:.0f} %), busy {machine['busy_pct']:.0f} %"
    )
    return DelayAllowance(rtt_ms=ab + ba, ab_ms=ab, ba_ms=ba, detail=detail)
