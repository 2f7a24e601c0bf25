"""What the base received: one CSV line per command the (simulated) Create 3 took, so the analysis
can hold it against what the host sent (fieldtest.analysis.metrics.basereceived).

    received_ns,type,seq,stamp_ns,linear,angular,taken_ns

``received_ns`` the command's arrival (the middleware's stamp) on the base's clock (the robot
machine's), ``type`` ``twist`` or ``twist_stamped``, ``seq`` the host's sequence number from a
TwistStamped's frame_id ("seq:<k>", -1 when the message carries none: a Twist), ``stamp_ns`` its
header stamp (0 for a Twist), ``taken_ns`` when the base's callback took it (same clock; records
written before the column have none, and read as taken on arrival). Each line is flushed as it is
written, so a killed base leaves every command it took. A real Create 3 writes no such record.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BASE_DIR = "base"  # in a trial directory
BASE_COMMANDS_FILE = "commands.csv"
HEADER = "received_ns,type,seq,stamp_ns,linear,angular,taken_ns"


class BaseCommandLog:
    """Append the commands a base receives to ``path`` (thread-safe, flushed per line)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w")
        self._file.write(HEADER + "\n")
        self._file.flush()
        self._lock = threading.Lock()

    def add(self, msg: Any, received_ns: int, taken_ns: int) -> None:
        from fieldtest.rosmsg import seq_of

        header = getattr(msg, "header", None)
        twist = getattr(msg, "twist", msg)
        kind, seq, stamp = "twist", -1, 0
        if header is not None:
            kind = "twist_stamped"
            found = seq_of(header.frame_id)
            seq = -1 if found is None else found
            stamp = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
        line = f"{received_ns},{kind},{seq},{stamp},{twist.linear.x!r},{twist.angular.z!r},{taken_ns}\n"
        with self._lock:
            if not self._file.closed:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass
class BaseCommands:
    received_ns: np.ndarray
    stamped: np.ndarray  # bool
    seq: np.ndarray
    stamp_ns: np.ndarray
    linear: np.ndarray
    angular: np.ndarray
    taken_ns: np.ndarray | None = None  # when the base took each; None: not recorded (twin receipts)


def read_base_commands(path: str | Path) -> BaseCommands:
    """Read a base's command record; a cut last line (the base killed mid-write) is dropped."""
    lines = Path(path).read_text().splitlines(keepends=True)
    width = len(lines[0].split(",")) if lines else len(HEADER.split(","))
    rows = [row for line in lines[1:] if (row := _row(line, width)) is not None]
    cols: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [()] * 7
    return BaseCommands(
        received_ns=np.array(cols[0], dtype=np.int64),
        stamped=np.array(cols[1], dtype=bool),
        seq=np.array(cols[2], dtype=np.int64),
        stamp_ns=np.array(cols[3], dtype=np.int64),
        linear=np.array(cols[4], dtype=float),
        angular=np.array(cols[5], dtype=float),
        taken_ns=np.array(cols[6], dtype=np.int64),
    )


def _row(line: str, width: int) -> tuple[Any, ...] | None:
    """One line's fields, taken_ns last (a record without the column: the arrival); None for a
    line cut mid-write (no line end, or fewer fields than the header names)."""
    cells = line.rstrip("\n").split(",")
    if not line.endswith("\n") or len(cells) != width or width not in (6, 7):
        return None
    try:
        received = int(cells[0])
        taken = int(cells[6]) if width == 7 else received
        return (received, cells[1] == "twist_stamped", int(cells[2]), int(cells[3]),
                float(cells[4]), float(cells[5]), taken)  # fmt: skip
    except ValueError:
        return None
