"""What a depth-1 hop lost, judged by what the same trial measured at it.

create3_republisher takes the user's commands best effort with depth 1 and hands them to the base
reliable, transient local, depth 1. At either hop a command still waiting when the next one
arrives is overwritten: a loss by design, not a fault. Each hop's losses are judged against that
hop's own record, so a command lost while the hop was measured to be free (a relay that drops it, a
subscription that never takes it) stays unexplained:

- ``SubscriptionHop``: the republisher's subscription. A command it did not take is explained when
  its executor took nothing, of any topic, from the latest the command can have reached it until
  the later command it took next reached it: the later one replaced it in the depth-1 history.
  When it reached the subscription is known from a sibling subscriber on the same machine (the link
  monitor's arrival stamp) plus the longest lag measured in the same trial between that stamp and
  the subscription's own reception stamp of a command it took.
- ``DeliveryHop``: the republisher's publisher into the base. A command taken but not delivered is
  explained when a later one was published within the longest delivery time the same trial
  measured for a command that was delivered.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Command = TypeVar("Command", bound=Hashable)  # a command's identity, as the caller chooses it


@dataclass(frozen=True)
class SubscriptionHop(Generic[Command]):
    """A depth-1 subscription and the one executor that takes from it."""

    arrived_ns: dict[Command, int]  # when a sibling subscriber on the same machine got each command
    taken_ns: dict[Command, int]  # when the executor took each command it took
    received_ns: dict[Command, int]  # the subscription's own reception stamp of those
    executor_takes_ns: Sequence[int]  # every take of that executor, every topic
    rank: dict[Command, int]  # each command's place in the sender's order
    _takes: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_takes", sorted(self.executor_takes_ns))

    def lost(self) -> list[Command]:
        return [k for k in self.arrived_ns if k not in self.taken_ns]

    def longest_lag_ns(self) -> int:
        """How much later than the sibling's arrival stamp the subscription received a command, at most."""
        lags = [self.received_ns[k] - self.arrived_ns[k] for k in self.received_ns if k in self.arrived_ns]
        return max(lags, default=0)

    def latest_arrival_ns(self, lost: Command) -> int:
        """The latest ``lost`` can have reached the subscription: its sibling's stamp plus the longest
        lag, and not before the command ahead of it was taken (else it would have replaced that one)."""
        latest = self.arrived_ns[lost] + self.longest_lag_ns()
        ahead = [k for k in self.taken_ns if self.rank[k] < self.rank[lost]]
        if ahead:
            latest = max(latest, self.taken_ns[max(ahead, key=self.rank.__getitem__)])
        return latest

    def next_taken(self, lost: Command) -> Command | None:
        """The command the executor took next in the sender's order: the one that replaced ``lost``."""
        later = [k for k in self.taken_ns if self.rank[k] > self.rank[lost]]
        return min(later, key=self.rank.__getitem__, default=None)

    def free_take(self, lost: Command, replacing: Command) -> int | None:
        """A take of the executor after ``lost`` had arrived and before ``replacing`` did: the
        executor was free to take ``lost``. None when there was none (an overwrite)."""
        start = self.latest_arrival_ns(lost)
        end = self.received_ns.get(replacing) or self.taken_ns[replacing]
        i = bisect.bisect_right(self._takes, start)
        return self._takes[i] if i < len(self._takes) and self._takes[i] < end else None

    def overwritten(self, lost: Command) -> bool:
        replacing = self.next_taken(lost)
        return replacing is not None and self.free_take(lost, replacing) is None

    def unexplained(self) -> list[Command]:
        return [k for k in self.lost() if not self.overwritten(k)]


@dataclass(frozen=True)
class DeliveryHop(Generic[Command]):
    """A reliable depth-1 publisher and its subscriber."""

    published_ns: dict[Command, int]
    delivered_ns: dict[Command, int]
    rank: dict[Command, int]  # the publisher's order

    def lost(self) -> list[Command]:
        return [k for k in self.published_ns if k not in self.delivered_ns]

    def longest_delivery_ns(self) -> int:
        times = [
            self.delivered_ns[k] - self.published_ns[k] for k in self.delivered_ns if k in self.published_ns
        ]
        return max([0, *times])

    def replaced_by(self, lost: Command) -> Command | None:
        """A later command published while ``lost`` could still have been waiting to be delivered."""
        bound, published = self.longest_delivery_ns(), self.published_ns[lost]
        later = [k for k in self.published_ns if self.rank[k] > self.rank[lost]]
        return next((k for k in later if self.published_ns[k] - published <= bound), None)

    def unexplained(self) -> list[Command]:
        return [k for k in self.lost() if self.replaced_by(k) is None]


def align_relayed(
    stamps: Sequence[int], arrivals: Sequence[tuple[int, int]], silence_ns: int
) -> dict[int, int]:
    """Which received command each relayed message was, for messages that carry no sequence number.

    The link monitor's relay publishes each command it receives, in the order it receives them, with
    a header stamped when it publishes: after that command's arrival. ``stamps`` are the header
    stamps of the relayed messages a hop took, ``arrivals`` (seq, arrival ns) the link monitor's
    receipts in the order it recorded them, both on the robot's clock. Matched from the last
    backwards, each stamp to the latest unmatched command that arrived before it: a command the
    hop did not take leaves its stamp out, so where two arrivals precede one stamp the later one is
    the one that overwrote the other. A stamp no arrival precedes within the relay's silence time
    is the relay's own zero (its silence stop or final stop) and is left out. Returns stamp -> seq.
    """
    relayed = sorted(s for s in stamps if any(0 <= s - a < silence_ns for _, a in arrivals))
    matched: dict[int, int] = {}
    index = len(arrivals) - 1
    for stamp in reversed(relayed):
        while index >= 0 and arrivals[index][1] > stamp:
            index -= 1
        if index < 0:
            break
        matched[stamp] = arrivals[index][0]
        index -= 1
    return matched
