"""The host end: the plan's /cmd_vel stream, on time, always ending with a stop burst.

A ``CommandStreamer`` answers the robot's clock-offset probes, waits until the robot is on the
link (a probe arrived and, where the transport can tell, the command topic has a subscriber),
then sends plan tick k at stream start + k / rate. Deadlines are absolute, so sleep overshoot
never accumulates; a late tick is sent at once and the next keeps its own time. Each command is
a TwistStamped (header.stamp = send time, frame_id "seq:<k>"); with ``cmd_type: twist`` (Humble)
a Twist on /cmd_vel followed by a std_msgs/Header on /fieldtest/cmd_stamp. Every command goes
into the host bag (<trial>/host) as the TwistStamped sent.

Whatever ends the stream (the last tick, a stop request, no robot, no go, an exception) it sends
``STOP_BURST_COUNT`` zero commands with seq numbers from n_ticks on. ``close`` then leaves the
link, closes the bag and writes ``host_status.json`` and the host's part of trial.yaml.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.names import STOP_BURST_COUNT, STOP_BURST_SPACING_S
from fieldtest.plan import Schedule
from fieldtest.realtime import leave_realtime, thread_priority
from fieldtest.record import (
    CLOCK_PROBE_REPLY_TOPIC,
    CLOCK_PROBE_TOPIC,
    CMD_STAMP_TOPIC,
    CMD_VEL_TOPIC,
    HOST_BAG,
    BagWriter,
    TrialOutcome,
    TrialRequest,
)
from fieldtest.transport.base import Prepared, Transport, prepare, stamped_publisher, timed_subscribe

from .clock import Clock
from .link import close_transport, wait_matched, warm_up_codecs
from .status import say, update_outcome, write_status

LINK_TIMEOUT_S = 30.0
LINK_SETTLE_S = 0.5  # after the robot is seen: discovery of the remaining endpoints
STREAM_LEAD_S = 0.05  # tick 0 this long after the decision to start, so it is on time
LINGER_S = 0.3  # after the stop burst: let queued/reliable messages leave before closing
STATUS_FILE = "host_status.json"
EXIT_NO_ROBOT = 3
EMISSION_PRIORITY = 50  # above the other twin processes (FIFO 10): the send loop must win its core

SendFn = Callable[[int, float, float], int]
PrepareFn = Callable[[int, float, float], None]
GoFn = Callable[[threading.Event], bool]


class Phase(str, enum.Enum):
    WAITING_ROBOT = "waiting-robot"
    WAITING_GO = "waiting-go"
    STREAMING = "streaming"
    STOPPING = "stopping"
    DONE = "done"


def emit_schedule(
    clock: Clock,
    start_ns: int,
    schedule: Schedule,
    send: SendFn,
    stop: threading.Event | None = None,
    prepare: PrepareFn | None = None,
) -> int:
    """Send tick i at ``start_ns + t_s[i]`` (absolute deadlines); returns how many were sent.
    ``prepare`` gets each tick before the wait for its deadline (work that must not delay it)."""
    for i in range(len(schedule.seq)):
        tick = int(schedule.seq[i]), float(schedule.linear_mps[i]), float(schedule.angular_rps[i])
        if prepare is not None:
            prepare(*tick)
        if not clock.sleep_until(start_ns + round(float(schedule.t_s[i]) * 1e9), stop):
            return i
        send(*tick)
    return len(schedule.seq)


@dataclass
class StreamResult:
    start_ns: int | None = None
    plan_sent: int = 0
    burst_sent: int = 0
    completed: bool = False
    end: str = "not-started"


class CommandStreamer:
    """The host end of a trial over ``transport``: command publisher(s), probe responder, host bag."""

    def __init__(
        self, request: TrialRequest, trial_dir: Path, transport: Transport, *, realtime: bool = False
    ):
        self.request = request
        self.realtime = realtime  # recorded in the status; the process asked for it
        self.plan = request.plan
        self.trial_dir = trial_dir
        self.clock = Clock()
        self.started_ns = self.clock.now_ns()
        self.phase = Phase.WAITING_ROBOT
        self.probes_answered = 0
        self.first_probe_ns: int | None = None
        self.last_probe_mono: float | None = None
        self.longest_probe_gap_s = 0.0  # between two probe arrivals while streaming
        self.commands_sent = 0  # live count (the result is filled in at the end)
        warm_up_codecs(rosmsg.TWIST_STAMPED, rosmsg.TWIST, rosmsg.HEADER, rosmsg.CLOCK_PROBE)
        self.transport = transport
        self.transport_hung = False
        try:
            self.bag = BagWriter(trial_dir / HOST_BAG, background=True)
        except BaseException:
            self.transport.close()
            raise
        self.twist_mode = request.cmd_type == "twist"
        if self.twist_mode:
            self._publish_twist = transport.publisher(CMD_VEL_TOPIC, rosmsg.TWIST)
            self._publish_stamp = transport.publisher(CMD_STAMP_TOPIC, rosmsg.HEADER)
        else:  # the send stamp is taken by the transport, as close to the wire as it can
            self._publish_cmd = stamped_publisher(
                transport, CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, self.clock
            )
        self._publish_reply = stamped_publisher(
            transport, CLOCK_PROBE_REPLY_TOPIC, rosmsg.CLOCK_PROBE, rosmsg.PROBE_T3, self.clock
        )
        timed_subscribe(transport, CLOCK_PROBE_TOPIC, rosmsg.CLOCK_PROBE, self._on_probe, self.clock)
        self.result = StreamResult()
        self._prepared: tuple[int, Prepared] | None = None

    # Clock probes -------------------------------------------------------------------------
    def _on_probe(self, msg: Any, t2: int) -> None:
        """Answer with t1 echoed, t2 = the probe's arrival; the transport stamps t3 as it sends."""
        now = time.monotonic()
        if self.phase == Phase.STREAMING and self.last_probe_mono is not None:
            # what a lost-robot watchdog compares with its limit, at its worst
            self.longest_probe_gap_s = max(self.longest_probe_gap_s, now - self.last_probe_mono)
        self.last_probe_mono = now
        if self.first_probe_ns is None:
            self.first_probe_ns = t2
        reply = rosmsg.msg_class(rosmsg.CLOCK_PROBE)(id=msg.id, t1=msg.t1, t2=rosmsg.time_msg(t2), t3=msg.t3)
        self._publish_reply(prepare(reply, rosmsg.CLOCK_PROBE))
        self.probes_answered += 1

    def probe_age_s(self) -> float | None:
        """How long since the robot's last probe arrived (None before the first)."""
        return None if self.last_probe_mono is None else time.monotonic() - self.last_probe_mono

    # Commands -----------------------------------------------------------------------------
    def prepare_command(self, seq: int, linear: float, angular: float) -> None:
        """Serialize a command ahead of its deadline, so that sending it is only stamp and write."""
        if not self.twist_mode:
            self._prepared = seq, self._prepare(seq, linear, angular)

    @staticmethod
    def _prepare(seq: int, linear: float, angular: float) -> Prepared:
        return prepare(rosmsg.command(seq, 0, linear, angular), rosmsg.TWIST_STAMPED)

    def send_command(self, seq: int, linear: float, angular: float) -> int:
        """Publish one command now; returns its send time (host clock, ns)."""
        if self.twist_mode:  # a Twist has no stamp: the companion Header carries the time read first
            sent_ns = self.clock.now_ns()
            cmd = rosmsg.command(seq, sent_ns, linear, angular)
            self._publish_twist(cmd.twist)
            self._publish_stamp(cmd.header)
        else:
            if self._prepared is not None and self._prepared[0] == seq:
                out = self._prepared[1]
            else:
                out = self._prepare(seq, linear, angular)
            self._prepared = None
            sent_ns = self._publish_cmd(out)
            cmd = out.msg
        self.bag.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, sent_ns, cmd)
        self.commands_sent += 1
        return sent_ns

    def wait_for_robot(self, stop: threading.Event, timeout_s: float = LINK_TIMEOUT_S) -> bool:
        """True once the robot's probes arrive and the command topic is matched, then a settle time."""
        deadline = time.monotonic() + timeout_s
        while self.first_probe_ns is None:
            if stop.is_set() or time.monotonic() > deadline:
                return False
            stop.wait(0.01)
        topics = [CMD_VEL_TOPIC, CMD_STAMP_TOPIC] if self.twist_mode else [CMD_VEL_TOPIC]
        for topic in topics:
            if wait_matched(self.transport, topic, max(0.0, deadline - time.monotonic())) is False:
                return False
        return not stop.wait(LINK_SETTLE_S)

    def stream(self, stop: threading.Event) -> StreamResult:
        """The plan's commands on absolute deadlines, then the stop burst (also when stopped)."""
        schedule = self.plan.schedule()
        result = self.result
        result.start_ns = self.clock.now_ns() + round(STREAM_LEAD_S * 1e9)
        update_outcome(self.trial_dir, lambda o: setattr(o, "stream_start_ns", result.start_ns))
        say(f"STREAM start_ns={result.start_ns} ticks={len(schedule.seq)}")
        with thread_priority(EMISSION_PRIORITY):
            result.plan_sent = emit_schedule(
                self.clock, result.start_ns, schedule, self.send_command, stop, self.prepare_command
            )
        result.completed = result.plan_sent == len(schedule.seq)
        result.end = "completed" if result.completed else "stopped"
        # On completion the first zero goes out on the next tick, so the last segment keeps its length.
        next_tick_ns = result.start_ns + round(len(schedule.seq) * 1e9 / self.plan.command_rate_hz)
        self.stop_burst(next_tick_ns if result.completed else None)
        return result

    def stop_burst(self, first_ns: int | None = None) -> None:
        """STOP_BURST_COUNT zero commands (seq n_ticks, n_ticks + 1, ...), never interrupted."""
        first_ns = self.clock.now_ns() if first_ns is None else first_ns
        n_ticks = self.plan.n_ticks()
        for i in range(STOP_BURST_COUNT):
            self.prepare_command(n_ticks + i, 0.0, 0.0)
            self.clock.sleep_until(first_ns + round(i * STOP_BURST_SPACING_S * 1e9))
            self.send_command(n_ticks + i, 0.0, 0.0)
            self.result.burst_sent += 1

    # The trial ---------------------------------------------------------------------------
    def run(
        self,
        stop: threading.Event,
        link_timeout_s: float = LINK_TIMEOUT_S,
        *,
        go: GoFn | None = None,
        on_link: Callable[[], None] | None = None,
    ) -> StreamResult:
        """Wait for the robot, then for ``go`` (if given; False means do not stream), then stream.
        The stop burst goes out on every path, an exception included (``result.end`` "error")."""
        try:
            return self._run(stop, link_timeout_s, go, on_link)
        except BaseException:
            if not self.result.burst_sent:
                self.stop_burst()  # an error mid-stream must not leave the robot driving
            self.result.end = "error"
            raise

    def _run(
        self,
        stop: threading.Event,
        link_timeout_s: float,
        go: GoFn | None,
        on_link: Callable[[], None] | None,
    ) -> StreamResult:
        self.phase = Phase.WAITING_ROBOT
        if not self.wait_for_robot(stop, link_timeout_s):
            return self._abort("stopped" if stop.is_set() else "no-robot")
        if on_link is not None:
            on_link()
        if go is not None:
            self.phase = Phase.WAITING_GO
            if not go(stop):
                return self._abort("stopped")
        self.phase = Phase.STREAMING
        result = self.stream(stop)
        self.phase = Phase.STOPPING
        return result

    def _abort(self, end: str) -> StreamResult:
        self.result.end = end
        self.phase = Phase.STOPPING
        self.stop_burst()
        return self.result

    def close(self) -> dict[str, Any]:
        """Leave the link (after a short linger), close the bag, write the status; safe to call twice."""
        leave_realtime()  # the stream is over: shutdown work must not hold up other trials
        try:
            if self.result.burst_sent:
                time.sleep(LINGER_S)
            self.transport_hung = not close_transport(self.transport, "host")
        finally:
            self.bag.close()
        status = self.summary()
        write_status(self.trial_dir / STATUS_FILE, status)
        update_outcome(self.trial_dir, lambda o: _add_to_outcome(o, status))
        return status

    def summary(self) -> dict[str, Any]:
        return {
            "end": self.result.end,
            "stream_start_ns": self.result.start_ns,
            "plan_ticks": self.plan.n_ticks(),
            "plan_sent": self.result.plan_sent,
            "last_plan_seq": self.result.plan_sent - 1 if self.result.plan_sent else None,
            "stop_burst_sent": self.result.burst_sent,
            "probes_answered": self.probes_answered,
            "longest_probe_gap_s": round(self.longest_probe_gap_s, 3),
            "realtime": self.realtime,
            "clock_base_ns": self.clock.monotonic_base_ns,
            "started_ns": self.started_ns,
            "stopped_ns": self.clock.now_ns(),
        }


def _add_to_outcome(outcome: TrialOutcome, status: dict[str, Any]) -> None:
    outcome.started_ns["host"] = status["started_ns"]
    outcome.stopped_ns["host"] = status["stopped_ns"]
    outcome.clock_bases_ns["host"] = status["clock_base_ns"]
    if status["stream_start_ns"] is not None:
        outcome.stream_start_ns = status["stream_start_ns"]
    if status["end"] == "no-robot":
        outcome.warnings.append(f"host: the robot did not appear on the link within {LINK_TIMEOUT_S:g} s")
