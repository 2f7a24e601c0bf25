"""The clock offset over a channel of its own: NTP-style probes in plain UDP datagrams.

The latency figures' clock offset normally comes from probes over the trial's own middleware
(``fieldtest.clocksync``), which measures the offset where the commands travel. A link that
delays the two directions unequally biases that: MQTT through mqtt_client, whose Paho C library
never sets TCP_NODELAY (paho.mqtt.c ``src/Socket.c``), holds small messages for the peer's delayed
ACK, and the probes read -14 to -19 ms where the clocks agree to well under a millisecond. For such
a trial the robot's link monitor probes the host's square driver over UDP instead (``clock_source:
udp``): one datagram each way, no broker, no Nagle. The four stamps, the minimum-delay filter and
the follow-up probes are ``fieldtest.clocksync``'s, so the samples go into the robot bag as any
other. The middleware's own probes still run: they prove the link both ways in the pre-flight.

Wire format (network byte order): probe ``!IQ`` (id, t1); reply ``!IQQQ`` (id, t1, t2, t3).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

from fieldtest.clocksync import ProbeInitiator, ProbeSample

PROBE = struct.Struct("!IQ")
REPLY = struct.Struct("!IQQQ")
# per trial: which channel the latency's clock offset comes from (each middleware's default:
# Middleware.lab_clock_source)
CLOCK_SOURCES = ("link", "udp")
RECV_TIMEOUT_S = 0.2


class UdpClockResponder:
    """The host's end: answers each probe with t2 (receipt) and t3 (reply), on ``now_ns``'s clock."""

    def __init__(self, now_ns: Callable[[], int], port: int, address: str = "0.0.0.0"):
        self.now_ns = now_ns
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.sock.settimeout(RECV_TIMEOUT_S)  # so close() ends the thread
        self.answered = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="udp-clock-responder", daemon=True)

    def start(self) -> UdpClockResponder:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                data, peer = self.sock.recvfrom(64)
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            t2 = self.now_ns()
            if len(data) != PROBE.size:
                continue
            probe_id, t1 = PROBE.unpack(data)
            try:
                self.sock.sendto(REPLY.pack(probe_id, t1, t2, self.now_ns()), peer)
            except OSError:
                return
            self.answered += 1

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=1.0)
        self.sock.close()


class UdpClockProber:
    """The robot's end: sends probes to the host when ``initiator`` says one is due (``poll``), takes
    the replies on a thread of its own and hands each completed sample to ``on_sample``."""

    def __init__(
        self,
        now_ns: Callable[[], int],
        host: str,
        port: int,
        on_sample: Callable[[ProbeSample], None],
        initiator: ProbeInitiator | None = None,
    ):
        self.now_ns = now_ns
        self.target = (host, port)
        self.on_sample = on_sample
        self.probes = initiator or ProbeInitiator()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(self.target)  # replies from elsewhere are dropped by the kernel
        self.sock.settimeout(RECV_TIMEOUT_S)
        self.send_errors = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="udp-clock-prober", daemon=True)
        self._thread.start()

    def poll(self, now_ns: int) -> None:
        if self.probes.due(now_ns):
            self._send()

    def _send(self, follow_up: bool = False) -> None:
        def send(probe_id: int) -> int:
            t1 = self.now_ns()
            try:
                self.sock.send(PROBE.pack(probe_id, t1))
            except OSError:  # host not up yet (ICMP refused): the next probe tries again
                self.send_errors += 1
            return t1

        self.probes.send_probe(send, follow_up=follow_up)

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self.sock.recv(64)
            except (TimeoutError, ConnectionRefusedError):  # refused: an earlier probe met a closed port
                continue
            except OSError:
                return
            t4 = self.now_ns()
            if len(data) != REPLY.size:
                continue
            probe_id, t1, t2, t3 = REPLY.unpack(data)
            sample = self.probes.on_reply(probe_id, t1, t2, t3, t4)
            if self.probes.wants_follow_up(sample):
                self._send(follow_up=True)  # at once, while both ends are warm (fieldtest.clocksync)
            if sample is not None:
                self.on_sample(sample)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=1.0)
        self.sock.close()
