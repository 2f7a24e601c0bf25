"""CycloneDDS's own latency tool as a reference: Debian ``ddsperf`` ping/pong on loopback.

    result = run_pingpong(rate_hz=20, size=64, duration_s=10)
    result.one_way.p50_us, result.one_way.p99_us, ...

``ddsperf ping`` stamps each ping at send time and, when the pong comes back, records
``(now - sent) / 2``: every figure it prints is already a one-way latency (round trip / 2). It
prints one line per second with that second's statistics, e.g.

    [13883] 2.000  vm:13873 size 64 mean 99.402us min 52.687us 50% 97.940us 90% 120.544us
        99% 187.097us max 187.097us cnt 100

``summarize`` pools the per-second lines: count, mean, min and max are exact; the percentiles of a
run longer than one second are estimated from the per-second percentiles (each second's quantile
curve through min/50/90/99/max, pooled by sample count), since ddsperf prints no raw samples.

Both processes use the kit's own CycloneDDS configuration for loopback (``loopback_config_xml``,
the same XML as ``fieldtest.middleware.dds.transport.cyclonedds_xml``): unicast discovery, no multicast.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

import numpy as np

from fieldtest.errors import FieldtestError
from fieldtest.middleware.dds.cyclonedds_config import cyclonedds_config_xml
from fieldtest.procs import lease_dds_domain

DDSPERF = "ddsperf"
INIT_WAIT_S = 5.0  # ping waits this long for the pong to match before giving up
STOP_TIMEOUT_S = 5.0

_PING_LINE = re.compile(
    r"^\[(?P<pid>\d+)\]\s+(?P<t>[\d.]+)\s+(?P<peer>\S+)\s+size\s+(?P<size>\d+)"
    r"\s+mean\s+(?P<mean>[\d.]+)us\s+min\s+(?P<min>[\d.]+)us"
    r"\s+50%\s+(?P<p50>[\d.]+)us\s+90%\s+(?P<p90>[\d.]+)us\s+99%\s+(?P<p99>[\d.]+)us"
    r"\s+max\s+(?P<max>[\d.]+)us\s+cnt\s+(?P<cnt>\d+)\s*$"
)
# Quantile levels of the figures on one ping line (min, 50 %, 90 %, 99 %, max).
_LEVELS = np.array([0.0, 0.5, 0.9, 0.99, 1.0])


class DdsperfError(FieldtestError, RuntimeError):
    """ddsperf is missing, failed, or printed nothing this module can read."""


@dataclass(frozen=True)
class PingInterval:
    """One per-second ping line: one-way latency statistics of that second (microseconds)."""

    t_s: float
    peer: str
    size: int
    mean_us: float
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float
    count: int


@dataclass(frozen=True)
class OneWayLatency:
    """One-way latency (round trip / 2) over a whole run, microseconds."""

    count: int
    mean_us: float
    min_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    max_us: float


@dataclass
class PingPongResult:
    rate_hz: float
    size: int
    duration_s: float
    one_way: OneWayLatency
    intervals: list[PingInterval] = field(default_factory=list)
    output: str = ""  # the ping side's full output, for the record


def parse_ping_output(text: str, source: str = "ddsperf output") -> list[PingInterval]:
    """The per-second latency lines of ``ddsperf ping`` output; other lines are skipped."""
    intervals = []
    for line in text.splitlines():
        match = _PING_LINE.match(line.strip())
        if match is None:
            continue
        g = match.groupdict()
        intervals.append(
            PingInterval(
                t_s=float(g["t"]),
                peer=g["peer"],
                size=int(g["size"]),
                mean_us=float(g["mean"]),
                min_us=float(g["min"]),
                p50_us=float(g["p50"]),
                p90_us=float(g["p90"]),
                p99_us=float(g["p99"]),
                max_us=float(g["max"]),
                count=int(g["cnt"]),
            )
        )
    if not intervals:
        raise DdsperfError(f"{source}: no ddsperf ping latency lines ('... mean ...us ... cnt N')")
    return intervals


def summarize(intervals: list[PingInterval]) -> OneWayLatency:
    """Pool per-second lines: exact count/mean/min/max, estimated percentiles (see module doc)."""
    if not intervals:
        raise DdsperfError("no ddsperf ping intervals to summarize")
    counts = np.array([i.count for i in intervals], dtype=float)
    total = int(counts.sum())
    mean = float(np.dot(counts, [i.mean_us for i in intervals]) / counts.sum())
    pooled = np.concatenate([_pseudo_samples(i) for i in intervals])
    p50, p90, p99 = (float(np.quantile(pooled, q)) for q in (0.5, 0.9, 0.99))
    return OneWayLatency(
        count=total,
        mean_us=mean,
        min_us=min(i.min_us for i in intervals),
        p50_us=p50,
        p90_us=p90,
        p99_us=p99,
        max_us=max(i.max_us for i in intervals),
    )


def _pseudo_samples(interval: PingInterval) -> np.ndarray:
    """``count`` values spread along the interval's quantile curve through its printed figures."""
    figures = [interval.min_us, interval.p50_us, interval.p90_us, interval.p99_us, interval.max_us]
    levels = (np.arange(interval.count) + 0.5) / interval.count
    return np.interp(levels, _LEVELS, np.maximum.accumulate(figures))


def loopback_config_xml(address: str = "127.0.0.1") -> str:
    """The kit's CycloneDDS configuration for a process at ``address`` whose peers are all there."""
    return cyclonedds_config_xml(interface_addresses=[address], peers=[address])


def find_ddsperf(binary: str = DDSPERF) -> str:
    path = binary if os.path.isabs(binary) else shutil.which(binary)
    if not path or not os.access(path, os.X_OK):
        raise DdsperfError(f"{binary}: ddsperf is not installed (apt install cyclonedds-tools)")
    return path


def run_pingpong(
    rate_hz: float = 100.0,
    size: int = 64,
    duration_s: float = 10.0,
    domain_id: int = 201,
    *,
    binary: str = DDSPERF,
    config_xml: str | None = None,
    prefix: list[str] | None = None,
) -> PingPongResult:
    """Run ``ddsperf pong`` and ``ddsperf ping <rate>Hz size <size>`` for ``duration_s`` seconds.

    ``prefix`` is put before both commands (e.g. ``["taskset", "-c", "1"]``). The pong process
    is always stopped before returning.
    """
    if rate_hz <= 0 or size < 12 or duration_s < 1:
        raise DdsperfError(
            f"ddsperf: need rate > 0, size >= 12, duration >= 1 s (got {rate_hz}, {size}, {duration_s})"
        )
    exe = find_ddsperf(binary)
    with lease_dds_domain(domain_id) as lease:  # ddsperf's topics are fixed: no other run may share it
        output = _ping_pong(exe, rate_hz, size, duration_s, lease.domain_id, config_xml, prefix)
    intervals = parse_ping_output(output, "ddsperf ping")
    return PingPongResult(rate_hz, size, duration_s, summarize(intervals), intervals, output)


def _ping_pong(
    exe: str,
    rate_hz: float,
    size: int,
    duration_s: float,
    domain_id: int,
    config_xml: str | None,
    prefix: list[str] | None,
) -> str:
    """ddsperf pong, then ping for ``duration_s``; ping's output (pong always stopped)."""
    env = {**os.environ, "CYCLONEDDS_URI": config_xml or loopback_config_xml()}
    pre = list(prefix or [])
    run_s = max(1, round(duration_s))
    pong_argv = [*pre, exe, "-i", str(domain_id), "-D", str(run_s + round(INIT_WAIT_S) + 5), "pong"]
    ping_argv = [*pre, exe, "-i", str(domain_id), "-D", str(run_s), "-Qminmatch:1"]
    ping_argv += [f"-Qinitwait:{INIT_WAIT_S:g}", "ping", f"{rate_hz:g}Hz", "size", str(size)]
    pong = subprocess.Popen(
        pong_argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    )
    try:
        ping = subprocess.run(
            ping_argv,
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=run_s + INIT_WAIT_S + 15,
        )
    except subprocess.TimeoutExpired as exc:
        raise DdsperfError(f"ddsperf ping did not finish within {exc.timeout:g} s") from None
    finally:
        _stop(pong)
    output = ping.stdout + ping.stderr
    if ping.returncode != 0:
        tail = " | ".join(output.strip().splitlines()[-2:]) or "(no output)"
        raise DdsperfError(f"ddsperf ping exited with code {ping.returncode}: {tail}")
    return output


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
