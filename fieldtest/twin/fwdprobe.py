"""Forwarding probe: how long the router or broker itself takes to pass a message on.

    python -m fieldtest.twin.fwdprobe --trial-dir DIR --out DIR/logs/forward_probe.json

Runs on the router's or broker's own node (no emulated link in between) beside a trial. Two
sessions of the trial's own transport, both clients of that router or broker, exchange a
command-sized TwistStamped every ``1/rate`` seconds: one publishes, the other receives, so every
sample crosses the router or broker (a Zenoh session would hand its own subscriber a sample
without it). The round trip is loopback plus the infrastructure's own forwarding plus the two
client libraries: an upper bound of what the router or broker adds on the trial's path, taken under
the trial's own load. Written as JSON when the probe is stopped (SIGINT or SIGTERM).
Definitions: docs/analysis.md, "Stack faults and the machine".
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fieldtest import rosmsg
from fieldtest.endpoints.clock import MonotonicClock
from fieldtest.endpoints.status import write_status
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import stop_on_signals
from fieldtest.realtime import try_realtime
from fieldtest.transport.base import prepare, stamped_publisher, timed_subscribe

PROBE_TOPIC = "fieldtest/forward_probe"
PROBE_RATE_HZ = 10.0  # half the command rate: enough samples for a p99 over a 96 s trial
READY = "forward probe:"  # then "routed", or why not


class ForwardProbe:
    """A publishing and a receiving session through the same router or broker."""

    def __init__(self, config: TransportConfig):
        self.clock = MonotonicClock()  # send and arrival are read in this one process
        self._next_seq = 0
        self.sent: dict[int, int] = {}
        self.arrived: dict[int, int] = {}
        self._lock = threading.Lock()
        self._rx = open_transport(config, "host")
        self._tx = open_transport(config, "host")
        timed_subscribe(self._rx, PROBE_TOPIC, rosmsg.TWIST_STAMPED, self._on_sample, self.clock)
        self._publish = stamped_publisher(
            self._tx, PROBE_TOPIC, rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, self.clock
        )

    def _on_sample(self, msg: Any, arrival_ns: int) -> None:
        seq = rosmsg.seq_of(msg.header.frame_id)
        if seq is not None:
            with self._lock:
                self.arrived.setdefault(seq, arrival_ns)

    def send(self, seq: int) -> None:
        sent_ns = self._publish(prepare(rosmsg.command(seq, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED))
        with self._lock:
            self.sent[seq] = sent_ns

    def wait_for_route(self, timeout_s: float) -> bool:
        """Send until one sample comes back (routes through a router take a moment to form)."""
        deadline = time.monotonic() + timeout_s
        seq = -1
        while time.monotonic() < deadline:
            self.send(seq)
            time.sleep(0.1)
            with self._lock:
                if self.arrived:
                    break
            seq -= 1
        with self._lock:
            routed = bool(self.arrived)
            self.sent.clear()
            self.arrived.clear()
        return routed

    def run(self, rate_hz: float, stop: threading.Event) -> None:
        period_ns = round(1e9 / rate_hz)
        next_ns = time.monotonic_ns()
        while not stop.is_set():
            self.send(self._next_seq)
            self._next_seq += 1
            next_ns += period_ns
            stop.wait(max(0.0, (next_ns - time.monotonic_ns()) / 1e9))
        time.sleep(0.5)  # the last samples are still on their way

    def summary(self) -> dict[str, Any]:
        with self._lock:
            rtt = [self.arrived[s] - t for s, t in self.sent.items() if s in self.arrived]
            sent = len(self.sent)
        return forward_summary(sent, np.array(rtt, dtype=float) / 1e6)

    def close(self) -> None:
        for transport in (self._tx, self._rx):
            transport.close()


def forward_summary(sent: int, rtt_ms: np.ndarray) -> dict[str, Any]:
    """The probe's figures: samples sent and lost, round trip through the infrastructure (ms)."""
    out: dict[str, Any] = {"samples": sent, "lost": sent - len(rtt_ms)}
    if len(rtt_ms):
        p50, p90, p99 = np.percentile(rtt_ms, [50, 90, 99])
        out |= {"rtt_p50_ms": p50, "rtt_p90_ms": p90, "rtt_p99_ms": p99, "rtt_max_ms": rtt_ms.max()}
    return {k: float(v) if isinstance(v, np.floating) else v for k, v in out.items()}


def probe_config(transport: TransportConfig) -> TransportConfig:
    """The trial's link with a namespace of its own, the direct Zenoh path and MQTT clients without
    Nagle's algorithm (the probe measures the router or broker, not the bridges or the clients' wait
    for an acknowledgement)."""
    from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
    from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings

    probe = transport.model_copy(update={"namespace": "fieldtest_probe"})
    return probe.with_settings(ZenohSettings, path="direct").with_settings(MqttSettings, nagle=False)


def main(argv: list[str] | None = None) -> int:
    from fieldtest.record.trial import read_trial

    parser = argparse.ArgumentParser(prog="fieldtest.twin.fwdprobe", description=__doc__.split("\n")[0])
    parser.add_argument("--trial-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rate-hz", type=float, default=PROBE_RATE_HZ)
    args = parser.parse_args(argv)
    realtime = try_realtime()  # like the router or broker and the twin's processes (and their threads)
    probe = ForwardProbe(probe_config(read_trial(args.trial_dir).request.transport))
    with stop_on_signals() as stop:
        try:
            routed = probe.wait_for_route(timeout_s=10.0)
            print(f"{READY} {'routed' if routed else 'no route through the router or broker'}", flush=True)
            if routed:
                probe.run(args.rate_hz, stop)
            result = probe.summary() if routed else {"samples": 0, "lost": 0, "error": "no route"}
            result["realtime"] = realtime
        finally:
            probe.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_status(args.out, result)  # atomic: the runner never reads half a file
    return 0


if __name__ == "__main__":
    sys.exit(main())
