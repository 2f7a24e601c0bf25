"""The lab's square driver: the twin's host streamer plus what a real lab needs (no ROS here).

The stream itself is ``fieldtest.twin.host.HostStreamer``, the same code the twin runs and tests:
plan ticks on absolute deadlines, TwistStamped with ``seq:<n>`` and send stamp (or Twist plus the
``/fieldtest/cmd_stamp`` Header on Humble), clock-probe answers, host bag, stop burst. This module
adds, for a real robot:

- a control folder the lab runner talks through (``<trial>/lab``): ``host_status.json`` rewritten
  twice a second (state, probes answered, age of the last probe), the ``go`` file the runner
  creates when pre-flight passed and the countdown ran, the ``stop`` file that aborts;
- a lost-robot watchdog: when no probe has arrived for ``robot_lost_s`` while streaming, the stream
  stops and the stop burst goes out (the base's own 0.5 s watchdog stops it anyway if the link is
  really gone; the burst covers a link that comes back);
- topic remapping, so the host can stream on ``fieldtest/cmd_vel`` when the robot relays.

Every way out (plan done, SIGINT/SIGTERM, stop file, lost robot, an exception) ends with the stop
burst; ``LabDriver.run`` returns the exit code and ``close`` writes the final status.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest.record import CMD_VEL_TOPIC, TrialRequest
from fieldtest.record.names import RELAY_CMD_VEL_TOPIC
from fieldtest.rosmsg import TimeField
from fieldtest.transport.base import (
    TimedCallback,
    TimeSource,
    Transport,
    TransportConfig,
    stamped_publisher,
    timed_subscribe,
)
from fieldtest.twin.common import write_status
from fieldtest.twin.host import EXIT_NO_ROBOT, LINK_TIMEOUT_S, HostStreamer

CONTROL_DIR = "lab"
HOST_STATUS = "host_status.json"
GO_FILE = "go"
STOP_FILE = "stop"
STATUS_PERIOD_S = 0.5
ROBOT_LOST_S = 2.0  # the robot probes every 0.5 s: four missed probes
EXIT_ROBOT_LOST = 4
EXIT_NO_GO = 5


class State(str, enum.Enum):
    WAITING_ROBOT = "waiting-robot"
    WAITING_GO = "waiting-go"
    STREAMING = "streaming"
    STOPPING = "stopping"
    DONE = "done"


class RemappedTransport:
    """A Transport whose topic names are remapped (e.g. /cmd_vel -> /fieldtest/cmd_vel)."""

    def __init__(self, inner: Transport, remap: dict[str, str]):
        self.inner = inner
        self.remap = dict(remap)

    def _name(self, topic: str) -> str:
        return self.remap.get(topic, topic)

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        return self.inner.publisher(self._name(topic), typename)

    def subscribe(self, topic: str, typename: str, callback: Callable[[Any], None]) -> None:
        self.inner.subscribe(self._name(topic), typename, callback)

    def stamped_publisher(
        self, topic: str, typename: str, stamp: TimeField, clock: TimeSource
    ) -> Callable[[Any], int]:
        return stamped_publisher(self.inner, self._name(topic), typename, stamp, clock)

    def timed_subscribe(self, topic: str, typename: str, callback: TimedCallback, clock: TimeSource) -> None:
        timed_subscribe(self.inner, self._name(topic), typename, callback, clock)

    def wait_matched(self, topic: str, timeout_s: float) -> bool | None:
        for name in ("wait_matched", "wait_for_match"):
            method = getattr(self.inner, name, None)
            if method is not None:
                return bool(method(self._name(topic), timeout_s=timeout_s))
        return True  # the inner transport cannot tell: treat as matched

    def close(self) -> None:
        self.inner.close()


def command_remap(relay: bool) -> dict[str, str]:
    """With a relaying robot the host must not talk to the base's own /cmd_vel."""
    return {CMD_VEL_TOPIC: RELAY_CMD_VEL_TOPIC} if relay else {}


class LabDriver(HostStreamer):
    """HostStreamer with the lab runner's control files and a lost-robot watchdog."""

    def __init__(
        self,
        request: TrialRequest,
        trial_dir: Path,
        *,
        transport: Transport | None = None,
        wait_for_go: bool = True,
        robot_lost_s: float = ROBOT_LOST_S,
    ):
        self.control_dir = trial_dir / CONTROL_DIR
        self.control_dir.mkdir(parents=True, exist_ok=True)
        self.wait_for_go = wait_for_go
        self.robot_lost_s = robot_lost_s
        self.state = State.WAITING_ROBOT
        self.last_probe_mono: float | None = None
        self.robot_lost = False
        self.commands_sent = 0  # live count (the streamer's result is filled in at the end)
        self.end_detail = ""
        self._status_lock = threading.Lock()
        super().__init__(request, trial_dir, transport=transport)

    # Probes: remember when the robot last spoke ------------------------------------------
    def _on_probe(self, msg: Any, t2: int) -> None:
        self.last_probe_mono = time.monotonic()
        super()._on_probe(msg, t2)

    def probe_age_s(self) -> float | None:
        return None if self.last_probe_mono is None else time.monotonic() - self.last_probe_mono

    def send_command(self, seq: int, linear: float, angular: float) -> int:
        sent_ns = super().send_command(seq, linear, angular)
        self.commands_sent += 1
        return sent_ns

    # Control files ------------------------------------------------------------------------
    def _file(self, name: str) -> Path:
        return self.control_dir / name

    def stop_requested(self) -> bool:
        return self._file(STOP_FILE).exists()

    def status(self) -> dict[str, Any]:
        age = self.probe_age_s()
        return {
            "state": self.state.value,
            "probes_answered": self.probes_answered,
            "last_probe_age_s": None if age is None else round(age, 3),
            "stream_start_ns": self.result.start_ns,
            "plan_ticks": self.plan.n_ticks(),
            "plan_sent": self.result.plan_sent,
            "commands_sent": self.commands_sent,
            "stop_burst_sent": self.result.burst_sent,
            "end": self.result.end,
            "end_detail": self.end_detail,
            "host_clock_ns": self.clock.now_ns(),
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
            age = self.probe_age_s()
            if self.state == State.STREAMING and age is not None and age > self.robot_lost_s:
                self.end_detail = f"robot lost: no clock probe for {age:.1f} s"
                self.robot_lost = True
                stop.set()

    def _wait_go(self, stop: threading.Event) -> bool:
        self.state = State.WAITING_GO
        self.write_status()
        while not self._file(GO_FILE).exists():
            if stop.wait(0.05):
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
            return self._run(stop, link_timeout_s)
        except BaseException:
            self.end_detail = self.end_detail or "error in the driver"
            self.result.end = "error"
            if not self.result.burst_sent:
                self.stop_burst()
            raise
        finally:
            self.state = State.DONE
            done.set()
            watcher.join(timeout=2.0)
            self.write_status()

    def _run(self, stop: threading.Event, link_timeout_s: float) -> int:
        if not self.wait_for_robot(stop, link_timeout_s):
            self.result.end = "stopped" if stop.is_set() else "no-robot"
            self.state = State.STOPPING
            self.stop_burst()
            return EXIT_NO_ROBOT if self.result.end == "no-robot" else 1
        if self.wait_for_go and not self._wait_go(stop):
            self.result.end = "stopped"
            self.state = State.STOPPING
            self.stop_burst()
            return EXIT_NO_GO
        self.state = State.STREAMING
        result = self.stream(stop)
        self.state = State.STOPPING
        if self.robot_lost and not result.completed:
            result.end = "robot-lost"
            return EXIT_ROBOT_LOST
        return 0 if result.completed else 1


def request_for_side(
    transport: TransportConfig, plan, cmd_type: str, name: str = "lab"
) -> TrialRequest:  # plan: SquarePlan
    """A TrialRequest for one side of a lab trial (the runner's trial.yaml holds the full one)."""
    return TrialRequest(name=name, plan=plan, transport=transport, network="lab", cmd_type=cmd_type)
