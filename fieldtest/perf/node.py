"""One end of a perf row, as its own process: ``main`` (sends pings, times the echoes) or ``relay``.

    python -m fieldtest.perf.node SPEC.json --role main --out main.json
    python -m fieldtest.perf.node SPEC.json --role relay --index 1 --out relay1.json

As performance_test's ``--roundtrip-mode Main``/``Relay``: the main side publishes each message on
the ping topic and the relay answers each on the pong topic with a message of the same type and
size, its sequence number and the relay's own number in ``header.frame_id`` and the echo's send
time in ``header.stamp`` (serialized once per row and patched, as the main side's pings, so the
relay's turn-around is the middleware's, not a second serialization). The relay does not decode
the pings either: it takes their CDR bytes (``Undecoded``) and reads the sequence number and send
stamp where the main side wrote them (decoding the whole message in Python, which ddsperf's pong
does in C, cost more than the middleware's own turn-around at 1-16 KB). The main side stamps each
ping's send time into it and keeps it; the relay records the arrival (one-way, on this machine's
CLOCK_MONOTONIC, shared by every namespace) and the main side the echo's (round trip). Before the measured messages, warm-up pings (sequence numbers from
``WARMUP_SEQ``) run until every relay has echoed one: discovery is then over and the first measured
message is not lost to it. A relay writes its record when stopped (SIGTERM), the main side when its
last echo is in or the drain time (the row's planned end) and then ``late_grace_s`` are over: an
echo after the planned end is kept and counted late (``planned_end_ns``), not lost.

Saturation (``rate_hz`` 0, performance_test's ``--rate 0``: "publish as fast as possible",
ApexAI/performance_test performance_test/src/main.cpp): the main side publishes back to back until
the row's duration is over or ``SATURATION_MAX_MESSAGES`` are out, whichever comes first (its
records, and the relays', stay bounded). The writer's own flow control sets the pace
(docs/perf.md): Cyclone blocks a writer whose unacknowledged bytes pass the writer history cache's
high-water mark, up to max_blocking_time, then refuses the write (cyclonedds
src/core/ddsi/src/ddsi_transmit.c, write_sample and throttle_writer; counted in ``writer_timeouts``);
Zenoh blocks a reliable put while its transmission queue is full (congestion control BLOCK) and
drops a best-effort one (DROP; zenoh-protocol core::CongestionControl); paho queues every publish
without limit (``max_queued_messages`` 0, paho-mqtt client.py), so the main side waits while
``WRITER_WINDOW`` of its messages are unwritten or unacknowledged.

In the lab (``fieldtest lab perf``) the relay's spec may name a UDP clock channel (``clock``: the
host's address and port): the relay then probes the host's ``UdpClockResponder`` with the lab's
``UdpClockProber`` (``fieldtest.labrun.nodelogic.udpclock``) for the whole row and keeps the four
stamps of every probe in its record (``clock_probes``), so the host can put the two clocks side by side.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldtest import rosmsg
from fieldtest.clocksync import ProbeSample
from fieldtest.endpoints.clock import MonotonicClock
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.procs import stop_on_signals, watch_parent
from fieldtest.record.recordnames import CLOCK_PROBE_TOPIC, CMD_STAMP_TOPIC
from fieldtest.transport.base import (
    Prepared,
    StampedPublish,
    TimeSource,
    Transport,
    Undecoded,
    stamped_publisher,
    timed_subscribe,
)

from .messages import PerfMessage, build, copy_seq, ids_of, parse_message, seq_of_cdr, set_ids

# The keystore's grants (fieldtest.security.policy): the host may publish CMD_STAMP_TOPIC and read
# CLOCK_PROBE_TOPIC, the robot the reverse, so secured rows run on the trial's own keystore. Never
# /cmd_vel: a bridge in the lab could hand a payload to the robot base.
PING_TOPIC = CMD_STAMP_TOPIC
PONG_TOPIC = CLOCK_PROBE_TOPIC
WARMUP_SEQ = 9_000_000_000
WARMUP_PERIOD_S = 0.2
READY = "PERF READY"
EXIT_NO_RELAY = 3
SATURATION_MAX_MESSAGES = 200_000  # about 45 MB of records on the relay at most
# Messages the main side lets a writer that queues without limit hold (a transport with a
# ``writer_backlog``: paho's queued, unwritten or awaiting PUBACK) before it waits, so the writer's
# queue stays bounded whatever the broker and reader do
WRITER_WINDOW = 64
WRITER_WAIT_S = 0.0005
# How long the main side keeps receiving after the row's planned end (last send + drain): a link or
# simulator that fell behind delivers late, and a late echo is a figure, not a loss. Bounded, so a
# lossy row (whose lost echoes never come) costs at most this much more.
LATE_GRACE_S = 2.0


def usage() -> dict:
    """performance_test's ru_* figures of this process (ru_maxrss in kB, as getrusage gives it)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"ru_utime": ru.ru_utime, "ru_stime": ru.ru_stime, "ru_maxrss": ru.ru_maxrss,
            "ru_nvcsw": ru.ru_nvcsw, "ru_nivcsw": ru.ru_nivcsw}  # fmt: skip


def _topics(config: TransportConfig) -> tuple[str, str]:
    """The ping and pong topics as the transports take them: each transport prepends the robot's
    namespace itself (``dds_topic_name``, ``zenoh_key``, ``mqtt_topic``), so a name given here with
    it would be namespaced twice (/tb4/tb4/...), which no keystore grant or ACL allows."""
    return PING_TOPIC, PONG_TOPIC


def run_relay(spec: dict, config: TransportConfig, index: int, out: Path) -> int:
    message = parse_message(spec["message"])
    echo = build(message)  # the echo: same type and size, serialized once, its seq patched per message
    set_ids(echo, 0, index)
    echo_all = spec["mode"] == "roundtrip"
    work_s = spec.get("relay_work_s", 0.0)  # a slow subscriber: time spent on each message
    ping, pong = _topics(config)
    # (seq, sent_ns, arrival_ns, handled_ns, echoed_ns): the stages of the relay's turn-around
    arrivals: list[tuple[int, int, int, int, int]] = []
    started: dict = {}  # usage at the first measured message
    clock = MonotonicClock()
    probes: list[tuple[int, int, int, int]] = []  # the UDP clock channel's (t1, t2, t3, t4), if any
    with stop_on_signals() as stop:
        watch_parent(stop)
        transport = registry.open_transport(config, "robot")
        try:
            sent_stamp = _sent_stamp(message)
            publish = stamped_publisher(transport, pong, message.typename, sent_stamp, clock)

            # The ping's bytes as they came (no decoding): its seq and send stamp are read in
            # place, the few steps here run cold at 10 Hz and each costs 10-40 us then.
            def on_ping(data: bytes, arrival_ns: int) -> None:
                handled_ns = clock.now_ns()  # the transport's queue is behind
                seq = seq_of_cdr(data)
                echoed_ns = 0
                if echo_all or seq >= WARMUP_SEQ:
                    copy_seq(echo, data)
                    echoed_ns = publish(echo)  # its stamp: the echo's send time
                if seq < WARMUP_SEQ:
                    if not arrivals:
                        started.update(usage())
                    arrivals.append((seq, sent_stamp.read(data), arrival_ns, handled_ns, echoed_ns))
                if work_s:
                    time.sleep(work_s)

            timed_subscribe(transport, ping, message.typename, Undecoded(on_ping), clock)
            print(READY, flush=True)
            _probe_clock_until(stop, spec.get("clock"), clock, probes)
        finally:
            transport.close()
    record = {"index": index, "arrivals": arrivals, "usage": usage(), "usage_start": started}
    if spec.get("clock"):
        record["clock_probes"] = probes
    out.write_text(json.dumps(record))
    return 0


def _probe_clock_until(
    stop: threading.Event,
    channel: dict | None,
    clock: TimeSource,
    probes: list[tuple[int, int, int, int]],
) -> None:
    """Wait for ``stop``; with a UDP clock ``channel`` ({"host", "port"}), probe the host meanwhile."""
    if not channel:
        stop.wait()
        return
    from fieldtest.labrun.nodelogic.udpclock import UdpClockProber

    def keep(sample: ProbeSample) -> None:
        probes.append((sample.t1_ns, sample.t2_ns, sample.t3_ns, sample.t4_ns))

    prober = UdpClockProber(clock.now_ns, channel["host"], channel["port"], keep)
    try:
        while not stop.wait(0.02):
            prober.poll(clock.now_ns())
    finally:
        prober.close()


def _sent_stamp(message: PerfMessage) -> rosmsg.TimeField:
    return rosmsg.TimeField(message.typename, ("header", "stamp"), 4)  # the header comes first


class _Echoes:
    """The echoes the main side got, per relay (thread-safe: the transport calls back on its thread)."""

    def __init__(self, relays: int) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.measured: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(1, relays + 1)}
        self.warm: set[int] = set()

    def add(self, msg: Any, arrival_ns: int) -> None:  # a decoded message of the row's type
        seq, relay = ids_of(msg)
        with self.changed:
            if seq >= WARMUP_SEQ:
                self.warm.add(relay)
            elif relay in self.measured:
                self.measured[relay].append((seq, rosmsg.ns_of(msg.header.stamp), arrival_ns))
            self.changed.notify_all()

    def count(self) -> int:
        return sum(len(v) for v in self.measured.values())


def _warm_up(
    spec: dict, out_msg: Prepared, publish: StampedPublish, echoes: _Echoes, stop: threading.Event
) -> list[int]:
    """Warm-up pings until every relay echoed one; the relays still silent at the timeout."""
    relays = set(range(1, spec["relays"] + 1))
    deadline = time.monotonic() + spec["discovery_s"]
    seq = WARMUP_SEQ
    while time.monotonic() < deadline and not stop.is_set():
        set_ids(out_msg, seq)
        publish(out_msg)
        seq += 1
        with echoes.changed:
            echoes.changed.wait_for(lambda: relays <= echoes.warm, WARMUP_PERIOD_S)
            if relays <= echoes.warm:
                return []
    with echoes.lock:
        return sorted(relays - echoes.warm)


def _send(
    spec: dict, out_msg: Prepared, publish: StampedPublish, stop: threading.Event
) -> tuple[list[int], int]:
    """The measured messages at the row's rate: their send times and how many left late (after
    their successor's deadline: the rate was not held)."""
    clock = MonotonicClock()
    count = max(1, round(spec["rate_hz"] * spec["duration_s"]))
    period_ns = round(1e9 / spec["rate_hz"])
    sends: list[int] = []
    late = 0
    start = clock.now_ns() + 50_000_000
    for seq in range(count):
        due = start + seq * period_ns
        if not _sleep_until(due, stop):
            break
        set_ids(out_msg, seq)
        sends.append(publish(out_msg))
        late += sends[-1] > due + period_ns
    return sends, late


def _saturate(
    spec: dict,
    out_msg: Prepared,
    publish: StampedPublish,
    stop: threading.Event,
    writer_backlog: Callable[[], int] | None,
) -> tuple[list[int], int]:
    """Publish back to back until the row's duration is over (or SATURATION_MAX_MESSAGES): the send
    times, and the largest writer backlog seen (``writer_backlog()``, MQTT: messages paho holds; 0
    where the middleware blocks the write itself)."""
    sends: list[int] = []
    backlog_max = 0
    end_ns = time.monotonic_ns() + round(spec["duration_s"] * 1e9)
    while len(sends) < SATURATION_MAX_MESSAGES and time.monotonic_ns() < end_ns and not stop.is_set():
        if writer_backlog is not None:
            while (held := writer_backlog()) >= WRITER_WINDOW and not stop.is_set():
                if time.monotonic_ns() >= end_ns:
                    return sends, max(backlog_max, held)
                time.sleep(WRITER_WAIT_S)
            backlog_max = max(backlog_max, held + 1)
        set_ids(out_msg, len(sends))
        sends.append(publish(out_msg))
    return sends, backlog_max


def _saturate_timed(
    spec: dict,
    out_msg: Prepared,
    publish: StampedPublish,
    stop: threading.Event,
    transport: Transport,
    record: dict,
) -> None:
    """_saturate into ``record``, with the end of the last write (``send_end_ns``: a write the
    middleware held back ends after its send stamp, and that time counts in T_loop)."""
    backlog = getattr(transport, "write_backlog", None)
    record["sends"], record["writer_backlog_max"] = _saturate(spec, out_msg, publish, stop, backlog)
    record["send_end_ns"] = MonotonicClock().now_ns()


def _sleep_until(due_ns: int, stop: threading.Event) -> bool:
    while (left := due_ns - time.monotonic_ns()) > 0:
        if stop.wait(min(left, 50_000_000) / 1e9):
            return False
    return not stop.is_set()


def run_main(spec: dict, config: TransportConfig, out: Path) -> int:
    message = parse_message(spec["message"])
    out_msg = build(message)
    ping, pong = _topics(config)
    echoes = _Echoes(spec["relays"])
    clock = MonotonicClock()
    record: dict = {"sends": [], "late_sends": 0, "silent_relays": [], "interrupted": False}
    saturated = spec["rate_hz"] == 0
    with stop_on_signals() as stop:
        watch_parent(stop)
        transport = registry.open_transport(config, "host")
        try:
            publish = stamped_publisher(transport, ping, message.typename, _sent_stamp(message), clock)
            timed_subscribe(transport, pong, message.typename, echoes.add, clock)
            print(READY, flush=True)
            warm_up_start = time.monotonic()
            record["silent_relays"] = _warm_up(spec, out_msg, publish, echoes, stop)
            record["discovery_s"] = round(time.monotonic() - warm_up_start, 3)  # until every relay echoed
            if not record["silent_relays"]:
                record["usage_start"] = usage()
                failures_before = getattr(transport, "write_failures", 0)
                if saturated:
                    _saturate_timed(spec, out_msg, publish, stop, transport, record)
                else:
                    record["sends"], record["late_sends"] = _send(spec, out_msg, publish, stop)
                record["writer_timeouts"] = getattr(transport, "write_failures", 0) - failures_before
                expected = len(record["sends"]) * spec["relays"] if spec["mode"] == "roundtrip" else 0
                if saturated:  # one way: what the writer still holds reaches the relays meanwhile
                    stop.wait(spec["drain_s"])
                planned_end_ns = clock.now_ns() + round(spec["drain_s"] * 1e9)
                record["planned_end_ns"] = planned_end_ns
                grace_s = spec.get("late_grace_s", LATE_GRACE_S)
                with echoes.changed:
                    left_s = (planned_end_ns - clock.now_ns()) / 1e9 + grace_s
                    echoes.changed.wait_for(lambda: echoes.count() >= expected, max(0.0, left_s))
            record["interrupted"] = stop.is_set()
        finally:
            transport.close()
    with echoes.lock:
        record["echoes"] = {str(k): v for k, v in echoes.measured.items()}
    record["usage"] = usage()
    out.write_text(json.dumps(record))
    return EXIT_NO_RELAY if record["silent_relays"] else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fieldtest.perf.node")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--role", choices=("main", "relay"), required=True)
    parser.add_argument("--index", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keystore", default="", help="this machine's copy of the keystore (lab relay)")
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    config = TransportConfig.model_validate(spec["transport"])
    if args.keystore:
        config = config.model_copy(update={"keystore": args.keystore})
    if args.role == "relay":
        config = config.model_copy(update=spec.get("relay_addresses", {}).get(str(args.index), {}))
        return run_relay(spec, config, args.index, args.out)
    return run_main(spec, config, args.out)


if __name__ == "__main__":
    sys.exit(main())
