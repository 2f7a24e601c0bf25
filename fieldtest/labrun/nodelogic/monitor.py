"""The lab's link monitor on the robot's Raspberry Pi: the shared command receiver, relaying to the base.

``fieldtest.endpoints.receiver.CommandReceiver`` does what the Pi must do with every command (the
twin robot runs the same code): stamp its arrival, pair Humble's Twist with its
``/fieldtest/cmd_stamp`` Header, correct the latency with the running clock-offset estimate
(``fieldtest.clocksync``), write a CommandReceipt per command and a ClockOffsetSample per
completed probe into the robot bag, and initiate the probes. The monitor composes it with:

- optionally a relay to the real base (``fieldtest.endpoints.stop.RelayWatchdog``: its own
  stop-on-silence watchdog, shorter than the base's 0.5 s, so the base is stopped by the relay
  when the host falls silent, and zero commands on exit), for setups where the base must not hear
  the host directly (DDS security, bridges on a Pi whose DDS is local-only);
- a status file (``robot_status.json``) rewritten twice a second, which the lab runner reads over
  ssh for pre-flight: probes completed, clock offset and round trip, the publishers the command
  subscription has matched, battery, base parameters.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest.endpoints.clock import Clock
from fieldtest.endpoints.loop import PeriodicLoop
from fieldtest.endpoints.receiver import STATUS_FILE, CommandReceiver
from fieldtest.endpoints.status import write_status
from fieldtest.endpoints.stop import RELAY_SILENCE_S, RelayWatchdog
from fieldtest.labrun.nodelogic.udpclock import UdpClockProber
from fieldtest.machine import lateness_summary
from fieldtest.realtime import leave_realtime
from fieldtest.record import TrialRequest
from fieldtest.transport.base import Transport

MONITOR_HZ = 50.0  # probe scheduling and relay watchdog resolution
STATUS_PERIOD_S = 0.5


class LabLinkMonitor:
    """The command receiver over a real link, relaying to the base; ``run(stop)`` blocks."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        *,
        transport: Transport,
        relay: Callable[[Any], None] | None = None,
        relay_silence_s: float = RELAY_SILENCE_S,
        realtime: bool = False,
        clock_udp: tuple[str, int] | None = None,
    ):
        self.realtime = realtime  # the node asked for SCHED_FIFO before its middleware started
        self.relay = RelayWatchdog(relay, relay_silence_s) if relay is not None else None
        self.extra_status: dict[str, Any] = {}  # filled by the node: battery, base parameters...
        self.status_sources: list[Callable[[], dict[str, Any]]] = []  # read at each status write
        self._last_status_mono = 0.0
        trial_dir.mkdir(parents=True, exist_ok=True)
        self.trial_dir = trial_dir
        self.clock = Clock()
        self.loop = PeriodicLoop(self.clock, MONITOR_HZ)
        self.started_ns = self.clock.now_ns()
        self.receiver = CommandReceiver(request, trial_dir, transport, self.clock, on_command=self._relay)
        self.udp_clock: UdpClockProber | None = None
        if clock_udp is not None:  # clock_source udp: the offset from plain UDP probes (labrun.udpclock)
            self.udp_clock = UdpClockProber(self.clock.now_ns, *clock_udp, self.receiver.record_offset_sample)
            self.receiver.use_offset_source(self.udp_clock.probes, "udp")

    def _relay(self, twist: Any, received_ns: int) -> None:
        """A command arrived: relay it to the base (the twin drives its model here)."""
        if self.relay is not None:
            self.relay.forward(twist)

    def step(self, tick: int) -> None:
        now = self.clock.now_ns()
        self.receiver.poll(now)
        if self.udp_clock is not None:
            self.udp_clock.poll(now)
        if self.relay is not None:
            self.relay.check()
        mono = time.monotonic()
        if mono - self._last_status_mono >= STATUS_PERIOD_S:
            self._last_status_mono = mono
            self.write_running_status()

    def run(self, stop: threading.Event, max_runtime_s: float | None = None) -> None:
        self.loop.run(self.step, stop, max_runtime_s)

    def write_running_status(self) -> None:
        status = self.summary()
        status["state"] = "running"
        write_status(self.trial_dir / STATUS_FILE, status)

    def summary(self) -> dict[str, Any]:
        """The link's counts and the loop's lateness, with the keys the twin robot writes: no model
        here, so no watchdog trips seen (the base's own watchdog is not observable) and nothing
        applied late or replayed (a command goes to the relay as it arrives)."""
        status = {
            **self.receiver.link_summary(),
            "watchdog_stops_ns": [],
            "late_command_replays": 0,
            "late_commands_applied": 0,
            "apply_late": lateness_summary([]),
            "step_late": lateness_summary(self.loop.step_late_ms),
            "steps_skipped": self.loop.steps_skipped,
            "realtime": self.realtime,
            "started_ns": self.started_ns,
            "robot_clock_ns": self.clock.now_ns(),
            # the runner's go waits for a match (preflight.check_robot_link): later commands are taken in
            "command_publishers": self.receiver.command_publishers(),
        }
        if self.relay is not None:
            status["relay"] = {"forwarded": self.relay.forwarded, "silence_stops": self.relay.silence_stops}
        status.update(self.extra_status)
        for source in self.status_sources:
            status.update(source())
        return status

    def close(self) -> dict[str, Any]:
        """Stop the base, leave the link, close the bag, write the final status."""
        if self.relay is not None:
            self.relay.final_stop()
        leave_realtime()
        if self.udp_clock is not None:
            self.udp_clock.close()
        self.receiver.close()
        status = self.summary()
        status["stopped_ns"] = self.clock.now_ns()
        status["state"] = "closed"
        write_status(self.trial_dir / STATUS_FILE, status)
        return status
