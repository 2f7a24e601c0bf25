"""Stops besides the streamer's burst: the relay's stop-on-silence watchdog and the emergency stop.

Layers that stop the robot, outermost last: the streamer's stop burst (every exit path), the
emergency stop (``zero_commands``: the lab runner, when the host did not confirm its burst), the
robot relay's silence watchdog (``RelayWatchdog``, when relaying) and the Create 3's own command
watchdog (0.5 s).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from fieldtest import rosmsg
from fieldtest.record import CMD_VEL_TOPIC
from fieldtest.transport.base import Transport

RELAY_SILENCE_S = 0.3  # below the Create 3's stop-on-silence timeout as the kit models it (0.5 s, unmeasured)
RELAY_FINAL_ZEROS = 3
ZERO_COUNT = 5
ZERO_SPACING_S = 0.05
ESTOP_SEQ = 2**32 - 1  # recognisable in the robot's receipts: not a plan tick


class RelayWatchdog:
    """Forwards commands to the base; after ``silence_s`` without one, sends a single zero."""

    def __init__(self, publish: Callable[[Any], None], silence_s: float = RELAY_SILENCE_S):
        self.publish = publish
        self.silence_s = silence_s
        self.forwarded = 0
        self.silence_stops = 0
        self._last_mono: float | None = None
        self._stopped = True  # nothing to stop before the first command
        self._lock = threading.Lock()

    def forward(self, twist: Any, now_mono: float | None = None) -> None:
        with self._lock:
            self.publish(twist)
            self.forwarded += 1
            self._last_mono = time.monotonic() if now_mono is None else now_mono
            self._stopped = _is_zero(twist)

    def check(self, now_mono: float | None = None) -> bool:
        """Send the zero if the host has been silent too long; True when it did."""
        now = time.monotonic() if now_mono is None else now_mono
        with self._lock:
            if self._stopped or self._last_mono is None or now - self._last_mono < self.silence_s:
                return False
            self.publish(rosmsg.twist(0.0, 0.0))
            self._stopped = True
            self.silence_stops += 1
            return True

    def final_stop(self) -> None:
        with self._lock:
            for _ in range(RELAY_FINAL_ZEROS):
                self.publish(rosmsg.twist(0.0, 0.0))
            self._stopped = True


def _is_zero(twist: Any) -> bool:
    return twist.linear.x == 0.0 and twist.angular.z == 0.0


def zero_commands(transport: Transport, cmd_type: str) -> int:
    """``ZERO_COUNT`` zero commands on /cmd_vel, ``ZERO_SPACING_S`` apart, in the trial's command
    type (a TwistStamped carries ``ESTOP_SEQ``); returns how many were sent."""
    publish = transport.publisher(
        CMD_VEL_TOPIC, rosmsg.TWIST if cmd_type == "twist" else rosmsg.TWIST_STAMPED
    )
    for _ in range(ZERO_COUNT):
        publish(_zero_command(cmd_type))
        time.sleep(ZERO_SPACING_S)
    return ZERO_COUNT


def _zero_command(cmd_type: str) -> Any:
    if cmd_type == "twist":
        return rosmsg.twist(0.0, 0.0)
    return rosmsg.command(ESTOP_SEQ, time.time_ns(), 0.0, 0.0)
