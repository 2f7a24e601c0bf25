"""The lab's square driver: the shared command streamer plus what a real lab needs (no ROS here).

The stream itself is ``fieldtest.endpoints.streamer.CommandStreamer``, the code the twin host
runs and its tests cover: plan ticks on absolute deadlines, TwistStamped with ``seq:<n>`` and send
stamp (or Twist plus the ``/fieldtest/cmd_stamp`` Header on Humble), clock-probe answers, host
bag, stop burst. This module composes it with, for a real robot:

- a control folder the lab runner talks through (``<trial>/lab``): ``host_status.json`` rewritten
  twice a second (state, probes answered, age of the last probe), the ``go`` file the runner
  creates when pre-flight passed and the countdown ran, the ``stop`` file that aborts;
- a lost-robot watchdog: when no probe has arrived for ``robot_lost_s`` while streaming, the stream
  stops and the stop burst goes out (if the link is really gone, the robot's relay stops the base
  after its 0.3 s of silence, or without a relay the Create 3's own stop-on-silence timeout, whose
  length is measured in the lab, not known; the burst covers a link that comes back).

Topic remapping (the host streams on ``fieldtest/cmd_vel`` when the robot relays) is the
transport's: ``fieldtest.endpoints.link.RemappedTransport``. Every way out (plan done,
SIGINT/SIGTERM, stop file, lost robot, an exception) ends with the stop burst; ``LabDriver.run``
returns the exit code and ``close`` writes the final status.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fieldtest.endpoints.status import write_status
from fieldtest.endpoints.streamer import (
    EXIT_NO_ROBOT,
    LINK_TIMEOUT_S,
    CommandStreamer,
    GoFn,
    Phase,
    StreamResult,
)
from fieldtest.labrun.nodelogic.udpclock import UdpClockResponder
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.transport.base import Transport, TransportConfig

CONTROL_DIR = "lab"
HOST_STATUS = "host_status.json"
GO_FILE = "go"
STOP_FILE = "stop"
STATUS_PERIOD_S = 0.5
ROBOT_LOST_S = 2.0  # the robot probes every 0.5 s: four missed probes
EXIT_ROBOT_LOST = 4
EXIT_NO_GO = 5


class LabDriver:
    """A CommandStreamer with the lab runner's control files and a lost-robot watchdog."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        *,
        transport: Transport,
        wait_for_go: bool = True,
        robot_lost_s: float = ROBOT_LOST_S,
        realtime: bool = False,
        clock_udp_port: int = 0,
    ):
        self.control_dir = trial_dir / CONTROL_DIR
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.wait_for_go = wait_for_go
        self.robot_lost_s = robot_lost_s
        self.robot_lost = False
        self.go_refused = False
        self.end_detail = ""
        self._status_lock = threading.Lock()
        self.streamer = CommandStreamer(request, trial_dir, transport, realtime=realtime)
        # clock_source udp: the robot measures the offset against this clock over UDP (labrun.udpclock)
        self.clock_responder = (
            UdpClockResponder(self.streamer.clock.now_ns, clock_udp_port).start() if clock_udp_port else None
        )

    # Control files ------------------------------------------------------------------------
    def _file(self, name: str) -> Path:
        return self.control_dir / name

    def stop_requested(self) -> bool:
        return self._file(STOP_FILE).exists()

    def status(self) -> dict[str, Any]:
        streamer, age = self.streamer, self.streamer.probe_age_s()
        return {
            "state": streamer.phase.value,
            "probes_answered": streamer.probes_answered,
            "last_probe_age_s": None if age is None else round(age, 3),
            "longest_probe_gap_s": round(streamer.longest_probe_gap_s, 3),
            "stream_start_ns": streamer.result.start_ns,
            "plan_ticks": streamer.plan.n_ticks(),
            "plan_sent": streamer.result.plan_sent,
            "commands_sent": streamer.commands_sent,
            "stop_burst_sent": streamer.result.burst_sent,
            "end": streamer.result.end,
            "end_detail": self.end_detail,
            "realtime": streamer.realtime,
            "host_clock_ns": streamer.clock.now_ns(),
            "udp_clock_probes_answered": self.clock_responder.answered if self.clock_responder else None,
        }

    def write_status(self) -> None:
        with self._status_lock:
            write_status(self._file(HOST_STATUS), self.status())

    def _status_loop(self, stop: threading.Event, done: threading.Event) -> None:
        while not done.wait(STATUS_PERIOD_S):
            self.write_status()
            if self.stop_requested() and not stop.is_set():
                self.end_detail = f"stop file {self._file(STOP_FILE)}"
                stop.set()
            age = self.streamer.probe_age_s()
            if self.streamer.phase == Phase.STREAMING and age is not None and age > self.robot_lost_s:
                self.end_detail = f"robot lost: no clock probe for {age:.1f} s"
                self.robot_lost = True
                stop.set()

    def _wait_go(self, stop: threading.Event) -> bool:
        self.write_status()
        while not self._file(GO_FILE).exists():
            if stop.wait(0.05):
                self.go_refused = True
                return False
        return True

    # The trial ---------------------------------------------------------------------------
    def run(self, stop: threading.Event, link_timeout_s: float = LINK_TIMEOUT_S) -> int:
        """Robot, go, stream; the stop burst on every path. Returns the process exit code."""
        done = threading.Event()
        watcher = threading.Thread(
            target=self._status_loop, args=(stop, done), name="lab-status", daemon=True
        )
        watcher.start()
        try:
            return self._exit_code(self.streamer.run(stop, link_timeout_s, go=self._go()))
        except BaseException:
            self.end_detail = self.end_detail or "error in the driver"
            raise
        finally:
            self.streamer.phase = Phase.DONE
            done.set()
            watcher.join(timeout=2.0)
            self.write_status()

    def _go(self) -> GoFn | None:
        return self._wait_go if self.wait_for_go else None

    def _exit_code(self, result: StreamResult) -> int:
        if result.end == "no-robot":
            return EXIT_NO_ROBOT
        if self.go_refused:
            return EXIT_NO_GO
        if self.robot_lost and not result.completed:
            result.end = "robot-lost"
            return EXIT_ROBOT_LOST
        return 0 if result.completed else 1

    def close(self) -> dict[str, Any]:
        """Leave the link, close the bag, write the streamer's status; safe to call twice."""
        if self.clock_responder is not None:
            self.clock_responder.close()
        return self.streamer.close()


def request_for_side(
    transport: TransportConfig, plan: SquarePlan, cmd_type: str, name: str = "lab"
) -> TrialRequest:
    """A TrialRequest for one side of a lab trial (the runner's trial.yaml holds the full one)."""
    return TrialRequest(name=name, plan=plan, transport=transport, network="lab", cmd_type=cmd_type)
