"""Commands a reader's own KEEP_LAST history overwrote while the reader took nothing.

A reader takes its commands in order from a history of ``depth``. A command it never took was
overwritten there only if the history filled before the reader took the next one: the command
``depth`` after a lost span had arrived (its arrival stamp) no later than the reader took the
command right after the span (its take time, on the same clock). A command lost anywhere else (on
the link, in a writer's history) leaves the reader's history with room at that take, so the span
stays unexplained. Where the arrival stamp is the take itself (the callback's own reading, or a
record from before take times were logged) no span is explained: the stall cannot be seen.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def lost_to_reader_stalls(
    lost_spans: Sequence[Sequence[int]],
    seq: np.ndarray,
    received_ns: np.ndarray,
    taken_ns: np.ndarray,
    depth: int | None,
) -> list[list[int]]:
    """The inclusive seq spans of ``lost_spans`` the reader's history of ``depth`` overwrote while
    it took nothing (``seq``, ``received_ns``, ``taken_ns``: the reader's takes; a seq taken twice
    counts at its first take). None (KEEP_ALL) overwrites nothing."""
    if depth is None or len(seq) == 0:
        return []
    takes = _first_takes(seq, received_ns, taken_ns)
    out = []
    for lo, hi in lost_spans:
        room_ns = _history_room_ns(takes, hi, depth)
        if room_ns is not None and room_ns <= 0:
            out.append([int(lo), int(hi)])
    return out


def history_room_ms(
    span: Sequence[int], seq: np.ndarray, received_ns: np.ndarray, taken_ns: np.ndarray, depth: int
) -> float | None:
    """How long after the reader's take right after ``span`` the command ``depth`` on arrived (ms;
    positive: the history still had room then); None where the takes do not tell."""
    room_ns = _history_room_ns(_first_takes(seq, received_ns, taken_ns), span[1], depth)
    return None if room_ns is None else room_ns / 1e6


Takes = tuple[np.ndarray, np.ndarray, np.ndarray]  # seqs (sorted, unique), their arrivals, their takes


def _first_takes(seq: np.ndarray, received_ns: np.ndarray, taken_ns: np.ndarray) -> Takes:
    seqs, first = np.unique(np.asarray(seq, dtype=np.int64), return_index=True)
    return seqs, np.asarray(received_ns, dtype=np.int64)[first], np.asarray(taken_ns, dtype=np.int64)[first]


def _history_room_ns(takes: Takes, last_lost: int, depth: int) -> int | None:
    """The arrival of the command ``depth`` after ``last_lost`` (or of the first taken after it)
    minus the reader's next take; None if the reader took nothing after the span, or nothing
    between it and that command."""
    seqs, arrived, taken = takes
    after = int(np.searchsorted(seqs, last_lost, side="right"))
    full = int(np.searchsorted(seqs, last_lost + depth))
    if not after < full < len(seqs):
        return None
    return int(arrived[full] - taken[after])
