"""The lab's link monitor on the robot's Raspberry Pi: the twin robot's logging without the model.

``fieldtest.twin.robot.TwinRobot`` already does what the Pi must do with every command: stamp its
arrival, pair Humble's Twist with its ``/fieldtest/cmd_stamp`` Header, correct the latency with
the running clock-offset estimate (``fieldtest.clocksync``), write a CommandReceipt per command
and a ClockOffsetSample per completed probe into the robot bag, and initiate the probes. The
monitor reuses all of that and replaces the simulated Create 3 with:

- optionally a relay to the real base (its own stop-on-silence watchdog, shorter than the base's
  0.5 s, so the base is stopped by the relay when the host falls silent, and zero commands on
  exit), for setups where the base must not hear the host directly (DDS security, bridges on a
  Pi whose DDS is local-only);
- a status file (``robot_status.json``) rewritten twice a second, which the lab runner reads over
  ssh for pre-flight: probes completed, clock offset and round trip, battery, base parameters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.record import TrialRequest
from fieldtest.transport.base import Transport
from fieldtest.twin.common import write_status
from fieldtest.twin.robot import STATUS_FILE, TwinRobot

MONITOR_HZ = 50.0  # probe scheduling and relay watchdog resolution
RELAY_SILENCE_S = 0.3  # below the base's 0.5 s watchdog: the relay stops the base first
RELAY_FINAL_ZEROS = 3
STATUS_PERIOD_S = 0.5


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


class LabLinkMonitor(TwinRobot):
    """TwinRobot's receipts and probes over a real link, relaying to the base instead of a model."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        *,
        transport: Transport | None = None,
        relay: Callable[[Any], None] | None = None,
        relay_silence_s: float = RELAY_SILENCE_S,
    ):
        self.relay = RelayWatchdog(relay, relay_silence_s) if relay is not None else None
        self.extra_status: dict[str, Any] = {}  # filled by the node: battery, base parameters...
        self._last_status_mono = 0.0
        trial_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(request, trial_dir, transport=transport, physics_hz=MONITOR_HZ)

    def _apply(self, twist: Any, received_ns: int) -> None:
        """A command arrived: relay it. (The twin drives its model here.)"""
        if self.relay is not None:
            self.relay.forward(twist)

    def step(self, tick: int) -> None:
        now = self.clock.now_ns()
        if self.probes.due(now):
            self._send_probe()
        if self.relay is not None:
            self.relay.check()
        mono = time.monotonic()
        if mono - self._last_status_mono >= STATUS_PERIOD_S:
            self._last_status_mono = mono
            self.write_running_status()

    def write_running_status(self) -> None:
        status = self.summary()
        status["state"] = "running"
        write_status(self.trial_dir / STATUS_FILE, status)

    def summary(self) -> dict[str, Any]:
        status = super().summary()
        for model_only in ("final_pose", "final_velocity", "robot_clock_shift_s"):
            status.pop(model_only, None)
        status["watchdog_stops_ns"] = []  # the base's own watchdog is not observable from here
        status["robot_clock_ns"] = self.clock.now_ns()
        if self.relay is not None:
            status["relay"] = {"forwarded": self.relay.forwarded, "silence_stops": self.relay.silence_stops}
        status.update(self.extra_status)
        return status

    def close(self) -> dict[str, Any]:
        if self.relay is not None:
            self.relay.final_stop()
        status = super().close()
        status["state"] = "closed"
        write_status(self.trial_dir / STATUS_FILE, status)
        return status
