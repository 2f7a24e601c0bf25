#!/usr/bin/env python3
"""Digital-twin benchmark: command emission jitter, one-way latency per middleware, ddsperf reference.

    .venv/bin/python benchmarks/bench_twin.py            # about 12 minutes
    .venv/bin/python benchmarks/bench_twin.py --quick    # about 4 minutes

1. Emission jitter: the real host streamer process (``fieldtest.twin.host``) streams a plan at
   20 Hz and at 100 Hz over DDS to a real twin robot process. The host is pinned to one core;
   a busy-loop process and the robot are pinned to the other core. Lateness of tick k = its
   send time (the host bag's log time, taken by ``CommandStreamer.send_command`` right before the
   publish call) minus its due time (stream start + k / rate, from the host's status file).
   Beside it, the host's own loop function ``emit_schedule`` alone, with a send function that
   only reads the clock (no serialization, publish or bag write), under the same CPU hog.
2. Latency per middleware: robot + host processes (plus the Zenoh router or Mosquitto broker the
   case needs) over each middleware, one after another, no hog; the robot bag's CommandReceipt
   ``latency_s`` (received - sent, corrected by the robot's clock-offset estimate).
3. Reference: CycloneDDS's own ``ddsperf`` ping/pong on loopback with the kit's DDS
   configuration, at the command rate and TwistStamped's size; its figures are round trip / 2.
4. Drift: the full 96 s trial over every middleware at once, as ``fieldtest demo`` runs it
   (trial runner: NatNet emulator, mocap recorder, twin robot and host, router or broker), each
   analyzed: lap-N vs lap-1 drift from the mocap ground truth, latency, CPU per process.

Targets: emission lateness p99 <= 0.2 ms at both rates; the kit's DDS one-way latency (p50) at
most 2x ddsperf's (round trip / 2, p50); lap drift at most 1 mm per middleware (loopback, ideal
robot: the stack itself adds no drift). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil

from fieldtest import rosmsg
from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.endpoints.clock import Clock
from fieldtest.endpoints.receiver import STATUS_FILE as ROBOT_STATUS_FILE
from fieldtest.endpoints.streamer import STATUS_FILE as HOST_STATUS_FILE
from fieldtest.endpoints.streamer import emit_schedule
from fieldtest.plan import SquarePlan
from fieldtest.procs import ProcessGroup, ProcessStartError, free_port, lease_dds_domain
from fieldtest.realtime import REALTIME_ENV, REALTIME_PRIORITY
from fieldtest.record import (
    CMD_VEL_TOPIC,
    HOST_BAG,
    RECEIPTS_TOPIC,
    ROBOT_BAG,
    TrialRecord,
    TrialRequest,
    new_trial_id,
    read_bag,
    read_trial,
    write_trial,
)
from fieldtest.record.reference import (
    Conditions,
    TwinTrialRow,
    TwinTrialsSummary,
    machine_text,
    utc_now,
    write_reference,
)
from fieldtest.record.trial import software_versions
from fieldtest.runner import QUICK_PLAN, STACK_DRIFT_LIMIT_M, run_twin_trial
from fieldtest.testkit.ddsperf import DdsperfError, run_pingpong
from fieldtest.transport.base import TransportConfig, prepare, stamped_publisher
from fieldtest.twin.common import GIL_SWITCH_S

JITTER_TARGET_P99_MS = 0.2
DDSPERF_FACTOR_TARGET = 2.0
TWIST_STAMPED_CDR_BYTES = 76  # a /cmd_vel TwistStamped with "seq:<n>" frame id, CDR incl. header
STOP_GRACE_S = 1.0  # after the host ends: the robot logs the stop burst
HOST_EXTRA_S = 60.0  # host link wait (up to 30 s) and stop burst on top of the plan


class BenchError(RuntimeError):
    """A benchmark run that produced no usable figures; the message says which and why."""


# Figures --------------------------------------------------------------------------------------
@dataclass
class Figures:
    """Order statistics of one series, milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    @classmethod
    def of_ns(cls, values_ns: np.ndarray) -> Figures:
        v = np.asarray(values_ns, dtype=float) / 1e6
        if len(v) == 0:
            raise BenchError("no samples")
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return cls(len(v), float(p50), float(p90), float(p99), float(v.max()), float(v.mean()))


@dataclass
class Load:
    """How busy the machine was during a run: 1-min load average at the start, per-core busy %."""

    loadavg_1min: float
    core_busy_percent: list[float]
    steal_percent: float = 0.0  # CPU time the hypervisor gave to other VMs (all cores)
    host_realtime: bool | None = None  # host runs: whether the kit's try_realtime was granted

    def text(self) -> str:
        cores = "/".join(f"{b:.0f}" for b in self.core_busy_percent)
        steal = f", steal {self.steal_percent:.0f} %" if self.steal_percent >= 0.5 else ""
        return f"load {self.loadavg_1min:.2f}, cores busy {cores} %{steal}"


@contextlib.contextmanager
def measured_load() -> Iterator[Load]:
    """Fills the yielded Load when the block ends (busy = not idle/iowait, per core)."""
    load = Load(os.getloadavg()[0], [])
    before = psutil.cpu_times(percpu=True)
    yield load
    after = psutil.cpu_times(percpu=True)
    total_all = steal = 0.0
    for b, a in zip(before, after, strict=True):
        total = sum(a) - sum(b)
        idle = (a.idle + a.iowait) - (b.idle + b.iowait)
        load.core_busy_percent.append(100.0 * (1.0 - idle / total) if total > 0 else 0.0)
        total_all += total
        steal += getattr(a, "steal", 0.0) - getattr(b, "steal", 0.0)
    load.steal_percent = 100.0 * steal / total_all if total_all > 0 else 0.0


def load_conditions(loads: list[Load]) -> Conditions:
    """One or more runs' conditions for a reference summary: the largest load, busy share per core and steal."""
    return Conditions(
        load_1min=max(x.loadavg_1min for x in loads),
        busy_percent=np.array([x.core_busy_percent for x in loads]).max(axis=0).tolist(),
        steal_percent=max(x.steal_percent for x in loads),
    )


def loads_text(loads: list[Load]) -> str:
    """Conditions of one or more runs: load average and busy % ranges, the largest steal."""
    if len(loads) == 1:
        return loads[0].text()
    avg = [x.loadavg_1min for x in loads]
    busy = np.array([x.core_busy_percent for x in loads])
    cores = "/".join(f"{lo:.0f}-{hi:.0f}" for lo, hi in zip(busy.min(axis=0), busy.max(axis=0), strict=True))
    steal = max(x.steal_percent for x in loads)
    steal_text = f", steal up to {steal:.0f} %" if steal >= 0.5 else ""
    return f"load {min(avg):.2f}-{max(avg):.2f}, cores busy {cores} %{steal_text}"


@dataclass
class JitterRow:
    """Lateness of one configuration, pooled over its repeated runs."""

    rate_hz: float
    source: str  # "host process" or "emit_schedule only"
    sched: str  # "normal" (SCHED_OTHER) or "fifo" (SCHED_FIFO, real-time priority)
    lateness: Figures
    run_p99_ms: list[float]
    loads: list[Load]
    ticks_planned: int
    note: str = ""


@dataclass
class LatencyRow:
    middleware: str
    latency: Figures | None
    raw: Figures | None  # received - sent without the offset correction (same clock here)
    received: int
    planned: int
    clock_offset_us: float | None
    error: str = ""
    load: Load | None = None
    raw_ns: np.ndarray | None = None  # the raw series itself, for pooling runs


@dataclass
class DriftRow:
    """One full twin trial of the drift part, as analyzed."""

    middleware: str
    end_reason: str
    drift_mm: float | None = None
    at_lap_end_mm: float | None = None
    heading_change_deg: float | None = None
    received: int = 0
    sent: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    cpu_percent: dict[str, float] = field(default_factory=dict)
    error: str = ""
    valid: bool | None = None  # the trial's stack check
    invalid_reasons: list[str] = field(default_factory=list)


@dataclass
class Report:
    settings: dict
    jitter: list[JitterRow] = field(default_factory=list)
    latency: list[LatencyRow] = field(default_factory=list)
    drift: list[DriftRow] = field(default_factory=list)
    drift_load: Load | None = None
    ddsperf: dict | None = None
    ddsperf_error: str = ""
    ddsperf_load: str = ""
    publish_cost_us: dict | None = None


# CPU placement --------------------------------------------------------------------------------
def core_pair() -> tuple[int, int] | None:
    """(core for the host, core for the hog) from the cores this process may use; None if only one."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[0], cores[1]) if len(cores) >= 2 else None


FIFO_PRIORITY = 50  # SCHED_FIFO priority for "fifo" runs (above every normal task, below kernel IRQ threads)
# How the host streamer is scheduled in the jitter runs:
SCHED_VARIANTS = {
    "kit": f"as the kit runs it: the whole process SCHED_FIFO {REALTIME_PRIORITY} if permitted (try_realtime)",
    "normal": "SCHED_OTHER (FIELDTEST_REALTIME=0)",
    "fifo-loop": f"the kit's setting plus the emission loop's thread at SCHED_FIFO {FIFO_PRIORITY}",
}
# The emission loop alone runs at the priority its host variant gives the loop's thread.
LOOP_PRIORITY = {"kit": REALTIME_PRIORITY, "normal": None, "fifo-loop": FIFO_PRIORITY}


def pinned(core: int | None) -> list[str]:
    """Command prefix: run on ``core`` (taskset)."""
    return ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []


def host_command(core: int | None, sched: str, args: list[str]) -> list[str]:
    """The host streamer's command line for a scheduling variant (see SCHED_VARIANTS)."""
    if sched == "fifo-loop":
        wrapper = Path(__file__).with_name("fifo_loop_host.py")
        return [*pinned(core), sys.executable, str(wrapper), "--priority", str(FIFO_PRIORITY), *args]
    return [*pinned(core), sys.executable, "-m", "fieldtest.twin.host", *args]


@contextlib.contextmanager
def scheduling(priority: int | None) -> Iterator[None]:
    """This thread at SCHED_FIFO ``priority`` for the block (None: unchanged; needs root/CAP_SYS_NICE)."""
    if priority is None:
        yield
        return
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        raise BenchError("SCHED_FIFO needs root or CAP_SYS_NICE (run with --sched normal)") from None
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


@contextlib.contextmanager
def cpu_hog(core: int | None) -> Iterator[None]:
    """A busy-loop process pinned to ``core`` for the duration; always stopped (by its pid)."""
    if core is None:
        yield
        return
    hog = subprocess.Popen(
        [*pinned(core), sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL
    )
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


# One twin run ---------------------------------------------------------------------------------
def bench_plan(rate_hz: float, duration_s: float) -> SquarePlan:
    """A square of 1 s sides and 1 s turns (8 s a lap), as many laps as fill ``duration_s``."""
    laps = max(1, round(duration_s / 8.0))
    return SquarePlan(
        side_duration_s=1.0, turn_rate_dps=90.0, laps=laps, command_rate_hz=rate_hz, start_delay_s=0.5
    )


@dataclass
class TwinRun:
    trial_dir: Path
    plan: SquarePlan
    host_code: int | None
    host_status: dict
    robot_status: dict


@contextlib.contextmanager
def infrastructure(config: TransportConfig, workdir: Path) -> Iterator[None]:
    """The Zenoh router or Mosquitto broker the middleware case needs, as the kit runs it (real-time)."""
    from fieldtest.middleware.registry import infrastructure as middleware_process

    process = middleware_process(config, workdir, realtime=True)
    with process if process is not None else contextlib.nullcontext():
        yield


def run_twin(
    middleware: str,
    plan: SquarePlan,
    work_dir: Path,
    domain_id: int,
    *,
    host_core: int | None = None,
    robot_core: int | None = None,
    host_sched: str = "kit",
) -> TwinRun:
    """Robot and host processes over ``middleware`` until the host has streamed the plan, on the
    first DDS domain from ``domain_id`` that no other run on this machine holds."""
    lease = lease_dds_domain(domain_id)
    transport = {
        "middleware": middleware,
        "domain_id": lease.domain_id,
        "zenoh_port": free_port(),
        "mqtt_port": free_port(),
    }
    request = TrialRequest(
        name=f"bench-{middleware}-{plan.command_rate_hz:g}hz", plan=plan, transport=transport
    )
    trial_dir = work_dir / new_trial_id(request.name)
    write_trial(trial_dir, TrialRecord(trial_id=trial_dir.name, request=request))
    procs = ProcessGroup(trial_dir / "logs")
    arg = ["--trial-dir", str(trial_dir)]
    try:
        with infrastructure(request.transport, trial_dir):
            procs.start("robot", [*pinned(robot_core), sys.executable, "-m", "fieldtest.twin.robot", *arg])
            procs.wait_ready("robot", timeout_s=30.0)
            env = {REALTIME_ENV: "0"} if host_sched == "normal" else None
            host = procs.start("host", host_command(host_core, host_sched, arg), env)
            try:
                host.popen.wait(plan.total_s + HOST_EXTRA_S)
            except subprocess.TimeoutExpired:
                procs.stop("host")
            time.sleep(STOP_GRACE_S)
    except ProcessStartError as exc:
        raise BenchError(f"{middleware}: {exc}") from None
    finally:
        procs.stop_all(order=["host", "robot"])
        lease.release()
    return TwinRun(
        trial_dir,
        plan,
        procs.procs["host"].popen.returncode if "host" in procs.procs else None,
        _read_json(trial_dir / HOST_STATUS_FILE),
        _read_json(trial_dir / ROBOT_STATUS_FILE),
    )


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _check_host(run: TwinRun, what: str) -> None:
    if run.host_code != 0 or run.host_status.get("stream_start_ns") is None:
        log = run.trial_dir / "logs" / "host.log"
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:]) if log.exists() else ""
        raise BenchError(f"{what}: host exited with code {run.host_code} ({tail or 'no output'})")


# Emission jitter ------------------------------------------------------------------------------
def host_lateness_ns(run: TwinRun) -> np.ndarray:
    """Send time minus due time of every plan tick in the host bag (ns)."""
    start_ns = int(run.host_status["stream_start_ns"])
    t_s = run.plan.schedule().t_s
    n_ticks = len(t_s)
    lateness = []
    for sent_ns, msg in read_bag(run.trial_dir / HOST_BAG).messages(CMD_VEL_TOPIC):
        seq = rosmsg.seq_of(msg.header.frame_id)
        if seq is not None and seq < n_ticks:
            lateness.append(sent_ns - (start_ns + round(float(t_s[seq]) * 1e9)))
    return np.array(lateness, dtype=np.int64)


def host_jitter_run(
    plan: SquarePlan, work_dir: Path, domain_id: int, cores: tuple[int, int] | None, sched: str
) -> tuple[np.ndarray, Load]:
    """One real host run over DDS: host on the first core, robot and CPU hog on the other."""
    host_core, other_core = cores if cores else (None, None)
    with cpu_hog(other_core), measured_load() as load:
        run = run_twin(
            "dds", plan, work_dir, domain_id, host_core=host_core, robot_core=other_core, host_sched=sched
        )
    _check_host(run, f"jitter run at {plan.command_rate_hz:g} Hz")
    load.host_realtime = run.host_status.get("realtime")
    return host_lateness_ns(run), load


def loop_jitter_run(plan: SquarePlan, cores: tuple[int, int] | None, sched: str) -> tuple[np.ndarray, Load]:
    """``emit_schedule`` in this process on the host core, sending nothing (clock read only)."""
    schedule = plan.schedule()
    clock = Clock()
    sent = np.zeros(len(schedule.seq), dtype=np.int64)

    def send(seq: int, _linear: float, _angular: float) -> int:
        sent[seq] = clock.now_ns()
        return int(sent[seq])

    previous_affinity = os.sched_getaffinity(0)
    previous_switch = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_S)  # as the host process does
    try:
        with cpu_hog(cores[1] if cores else None), measured_load() as load:
            if cores:
                os.sched_setaffinity(0, {cores[0]})
            with scheduling(LOOP_PRIORITY[sched]):
                start_ns = clock.now_ns() + 50_000_000
                emit_schedule(clock, start_ns, schedule, send)
    finally:
        os.sched_setaffinity(0, previous_affinity)
        sys.setswitchinterval(previous_switch)
    return sent - (start_ns + np.round(schedule.t_s * 1e9).astype(np.int64)), load


def measure_jitter(
    source: str,
    rate_hz: float,
    sched: str,
    settings: dict,
    work_dir: Path,
    domain_id: int,
    cores: tuple[int, int] | None,
) -> JitterRow:
    plan = bench_plan(rate_hz, settings["jitter_duration_s"])
    runs = []
    for _ in range(settings["repeat"]):
        if source == "host process":
            runs.append(host_jitter_run(plan, work_dir, domain_id, cores, sched))
        else:
            runs.append(loop_jitter_run(plan, cores, sched))
    pooled = np.concatenate([lateness for lateness, _ in runs])
    expected = plan.n_ticks() * len(runs)
    notes = [] if len(pooled) == expected else [f"{len(pooled)} of {expected} ticks sent"]
    realtime = {load.host_realtime for _, load in runs} - {None}
    if realtime:
        notes.append("host realtime=" + "/".join(sorted(str(x).lower() for x in realtime)))
    note = "; ".join(notes)
    return JitterRow(
        rate_hz,
        source,
        sched,
        Figures.of_ns(pooled),
        [Figures.of_ns(lateness).p99_ms for lateness, _ in runs],
        [load for _, load in runs],
        plan.n_ticks(),
        note,
    )


# Latency per middleware -----------------------------------------------------------------------
def measure_latency(middleware: str, duration_s: float, work_dir: Path, domain_id: int) -> LatencyRow:
    plan = bench_plan(20.0, duration_s)
    try:
        with measured_load() as load:
            run = run_twin(middleware, plan, work_dir, domain_id)
        _check_host(run, middleware)
        load.host_realtime = run.host_status.get("realtime")
    except BenchError as exc:
        return LatencyRow(middleware, None, None, 0, plan.n_ticks(), None, str(exc))
    latency, raw, seqs = [], [], set()
    for _t_ns, receipt in read_bag(run.trial_dir / ROBOT_BAG).messages(RECEIPTS_TOPIC):
        if receipt.seq >= plan.n_ticks() or receipt.seq in seqs:
            continue  # stop burst or a duplicate
        seqs.add(receipt.seq)
        latency.append(receipt.latency_s * 1e9)
        raw.append(rosmsg.ns_of(receipt.received) - rosmsg.ns_of(receipt.sent))
    offset = run.robot_status.get("clock_offset_s")
    finite = [x for x in latency if np.isfinite(x)]
    return LatencyRow(
        middleware,
        Figures.of_ns(np.array(finite)) if finite else None,
        Figures.of_ns(np.array(raw)) if raw else None,
        len(seqs),
        plan.n_ticks(),
        None if offset is None else offset * 1e6,
        "" if finite else "no receipts with a clock-offset estimate",
        load,
        np.array(raw) if raw else None,
    )


def dds_publish_cost_us(work_dir: Path, domain_id: int, count: int = 100) -> dict[str, float]:
    """How long the kit's DDS publish takes from its send stamp on, at the command rate (20 Hz, so
    after 50 ms idle), to a real twin robot subscriber: the send side's share of the measured
    latency, plus the return to Python (us)."""
    from fieldtest.middleware.registry import open_transport

    plan = bench_plan(20.0, 8.0)
    lease = lease_dds_domain(domain_id)  # no other run on this machine in the robot's domain
    request = TrialRequest(
        name="bench-publish-cost", plan=plan, transport={"middleware": "dds", "domain_id": lease.domain_id}
    )
    trial_dir = work_dir / new_trial_id(request.name)
    write_trial(trial_dir, TrialRecord(trial_id=trial_dir.name, request=request))
    procs = ProcessGroup(trial_dir / "logs")
    transport = None
    try:
        procs.start("robot", [sys.executable, "-m", "fieldtest.twin.robot", "--trial-dir", str(trial_dir)])
        procs.wait_ready("robot", timeout_s=30.0)
        transport = open_transport(request.transport, "host")
        clock = Clock()
        publish = stamped_publisher(
            transport, CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, rosmsg.COMMAND_SENT, clock
        )
        if not transport.wait_for_match(CMD_VEL_TOPIC, timeout_s=10.0):
            raise BenchError("publish cost: the twin robot did not match /cmd_vel within 10 s")
        durations = np.empty(count)
        for i in range(count):
            time.sleep(0.05)
            out = prepare(rosmsg.command(i, 0, 0.0, 0.0), rosmsg.TWIST_STAMPED)  # as the host, ahead
            t0 = clock.now_ns()
            sent_ns = publish(out)
            durations[i] = (clock.now_ns() - sent_ns) / 1e3  # after the send stamp: inside the latency
            if sent_ns < t0:
                raise BenchError("publish cost: the send stamp precedes the publish call")
    except ProcessStartError as exc:
        raise BenchError(f"publish cost: {exc}") from None
    finally:
        if transport is not None:
            transport.close()
        procs.stop_all()
        lease.release()
    return {
        "publish_p50_us": float(np.median(durations)),
        "publish_p90_us": float(np.percentile(durations, 90)),
    }


# Output ---------------------------------------------------------------------------------------
def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _met(ok: bool | None) -> str:
    return {True: "MET", False: "NOT MET", None: "n/a"}[ok]


def jitter_table(rows: list[JitterRow]) -> list[str]:
    lines = [
        "Command emission lateness vs the plan (send time - due time), ms; CPU hog on the other core",
        f"{'rate':>7}  {'measured':<19} {'sched':<9} {'ticks':>6} {'p50':>7} {'p99':>7} {'max':>7}  "
        f"{'p99<=' + str(JITTER_TARGET_P99_MS):<12} {'p99 per run':<20} conditions",
    ]
    for r in rows:
        f = r.lateness
        target = _met(f.p99_ms <= JITTER_TARGET_P99_MS) if r.source == "host process" else "(diagnostic)"
        per_run = "/".join(f"{x:.3f}" for x in r.run_p99_ms)
        lines.append(
            f"{r.rate_hz:>5g}Hz  {r.source:<19} {r.sched:<9} {f.count:>6} {f.p50_ms:>7.3f} {f.p99_ms:>7.3f} "
            f"{f.max_ms:>7.3f}  {target:<12} {per_run:<20} {loads_text(r.loads)} {r.note}".rstrip()
        )
    if rows:
        lines.append("sched: " + "; ".join(f"{k} = {v}" for k, v in SCHED_VARIANTS.items()))
    return lines


def _conditions(load: Load | None) -> str:
    if load is None:
        return ""
    realtime = "" if load.host_realtime is None else f" host realtime={str(load.host_realtime).lower()}"
    return load.text() + realtime


def latency_table(report: Report) -> list[str]:
    lines = [
        "One-way latency of /cmd_vel at 20 Hz, measured by the twin robot (CommandReceipt.latency_s), ms",
        f"{'middleware':<18} {'received':>9} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'raw p50':>7} "
        f"{'offset':>7}  conditions",
    ]
    for r in report.latency:
        if r.latency is None:
            lines.append(f"{r.middleware:<18} {r.received:>4}/{r.planned:<4} FAILED: {r.error}")
            continue
        f = r.latency
        offset = "-" if r.clock_offset_us is None else f"{r.clock_offset_us:.0f}us"
        lines.append(
            f"{r.middleware:<18} {r.received:>4}/{r.planned:<4} {f.p50_ms:>7.3f} {f.p90_ms:>7.3f} "
            f"{f.p99_ms:>7.3f} {f.max_ms:>7.3f} {_ms(r.raw.p50_ms if r.raw else None):>7} {offset:>7}  "
            f"{_conditions(r.load)}"
        )
    d = report.ddsperf
    if d is not None:
        lines.append(
            f"{'ddsperf (RTT/2)':<18} {d['count']:>9} {d['p50_us'] / 1e3:>7.3f} {d['p90_us'] / 1e3:>7.3f} "
            f"{d['p99_us'] / 1e3:>7.3f} {d['max_us'] / 1e3:>7.3f} {'':>7} {'':>7}  {report.ddsperf_load}"
        )
    elif "ddsperf" in report.settings.get("parts", []):
        lines.append(f"{'ddsperf (RTT/2)':<18} FAILED: {report.ddsperf_error or 'not run'}")
    if report.publish_cost_us:
        c = report.publish_cost_us
        lines.append(
            f"(inside the dds row: the host's publish from its send stamp on - dds_write in C, then back to "
            f"Python - takes "
            f"p50 {c['publish_p50_us']:.0f} us, p90 {c['publish_p90_us']:.0f} us at 20 Hz)"
        )
    return lines


def drift_table(report: Report) -> list[str]:
    plan = report.settings["drift_plan"]
    lines = [
        f"Lap drift on loopback, ideal robot: {plan}, "
        + (
            f"{report.settings['drift_parallel']} trials at a time"
            if report.settings.get("drift_parallel")
            else "every middleware at once as `fieldtest demo` runs them"
        ),
        f"{'middleware':<18} {'drift':>7} {'lap end':>8} {'heading':>8} {'received':>10} {'lat p50':>8} "
        f"{'lat p99':>8}  CPU % of one core",
        f"{'':<18} {'mm':>7} {'mm':>8} {'deg':>8} {'':>10} {'ms':>8} {'ms':>8}",
    ]
    for r in report.drift:
        if r.error:
            lines.append(f"{r.middleware:<18} {r.end_reason}: {r.error}")
            continue
        cpu = " ".join(f"{name} {pct:.1f}" for name, pct in r.cpu_percent.items())
        lines.append(
            f"{r.middleware:<18} {_ms(r.drift_mm):>7} {_ms(r.at_lap_end_mm):>8} {_ms(r.heading_change_deg):>8} "
            f"{f'{r.received}/{r.sent}':>10} {_ms(r.latency_p50_ms):>8} {_ms(r.latency_p99_ms):>8}  {cpu}"
        )
    if report.drift_load is not None:
        lines.append(f"conditions: {report.drift_load.text()}")
    return lines


def drift_met(report: Report) -> bool | None:
    if not report.drift:
        return None
    limit_mm = STACK_DRIFT_LIMIT_M * 1e3
    return all(r.drift_mm is not None and r.drift_mm <= limit_mm for r in report.drift)


def target_lines(report: Report) -> list[str]:
    lines = ["Targets"]
    for r in (r for r in report.jitter if r.source == "host process"):
        lines.append(
            f"  emission jitter p99 <= {JITTER_TARGET_P99_MS} ms at {r.rate_hz:g} Hz, hog on the other core "
            f"(host {r.sched}): {r.lateness.p99_ms:.3f} ms -> {_met(r.lateness.p99_ms <= JITTER_TARGET_P99_MS)}"
        )
    dds = next((r for r in report.latency if r.middleware == "dds" and r.latency is not None), None)
    if dds is not None and report.ddsperf is not None:
        ref_p50_ms = report.ddsperf["p50_us"] / 1e3
        limit_ms = DDSPERF_FACTOR_TARGET * ref_p50_ms
        lines.append(
            f"  DDS one-way p50 <= {DDSPERF_FACTOR_TARGET:g} x ddsperf RTT/2 p50 ({limit_ms:.3f} ms): "
            f"{dds.latency.p50_ms:.3f} ms = {dds.latency.p50_ms / ref_p50_ms:.2f}x -> "
            f"{_met(dds.latency.p50_ms <= limit_ms)}"
        )
        if dds.raw is not None:
            lines.append(
                f"  (for information, without the robot's clock-offset correction - same clock here: raw p50 "
                f"{dds.raw.p50_ms:.3f} ms = {dds.raw.p50_ms / ref_p50_ms:.2f}x)"
            )
        ref_p99_ms = report.ddsperf["p99_us"] / 1e3
        lines.append(
            f"  (for information, p99: DDS {dds.latency.p99_ms:.3f} ms vs ddsperf {ref_p99_ms:.3f} ms = "
            f"{dds.latency.p99_ms / ref_p99_ms:.2f}x)"
        )
    elif "latency" in report.settings.get("parts", []):
        lines.append("  DDS one-way vs ddsperf: n/a (one of the two was not measured)")
    if report.drift:
        limit_mm = STACK_DRIFT_LIMIT_M * 1e3
        over = [r for r in report.drift if r.drift_mm is None or r.drift_mm > limit_mm]
        shown = over or [max(report.drift, key=lambda r: r.drift_mm)]
        figures = ", ".join(f"{r.middleware} {_ms(r.drift_mm)} mm" for r in shown)
        lines.append(
            f"  lap drift <= {limit_mm:g} mm per middleware on loopback: "
            f"{'over or not measured' if over else 'worst'}: {figures} -> {_met(drift_met(report))}"
        )
    return lines


def print_report(report: Report) -> None:
    s = report.settings
    print()
    print(
        f"bench_twin on {s['machine']} ({s['cores']} cores), latency runs {s['duration_s']:g} s each, "
        f"jitter runs {s['jitter_duration_s']:g} s, host core {s['host_core']}, hog core {s['hog_core']}"
    )
    print("conditions: 1-min load average at the start of the run, busy % of each core during it")
    print()
    if report.jitter:
        print("\n".join(jitter_table(report.jitter)) + "\n")
    if report.latency or report.ddsperf is not None or report.ddsperf_error:
        print("\n".join(latency_table(report)) + "\n")
    if report.drift:
        print("\n".join(drift_table(report)) + "\n")
    for line in target_lines(report):
        print(line)


# Main -----------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (8 s each)")
    parser.add_argument("--duration", type=float, help="seconds per latency run (default 32, quick 8)")
    parser.add_argument("--jitter-duration", type=float, help="seconds per jitter run (default 24, quick 8)")
    parser.add_argument("--rates", default="20,100", help="command rates for the jitter runs, Hz")
    parser.add_argument("--repeat", type=int, default=1, help="runs per jitter configuration (pooled)")
    parser.add_argument(
        "--sched",
        default=",".join(SCHED_VARIANTS),
        help="host scheduling variants in the jitter runs, comma-separated: "
        + "; ".join(f"{k}: {v}" for k, v in SCHED_VARIANTS.items()),
    )
    parser.add_argument("--middlewares", default=",".join(MIDDLEWARES), help="comma-separated subset")
    parser.add_argument("--ddsperf-rate", type=float, default=20.0, help="ddsperf ping rate, Hz (default 20)")
    parser.add_argument("--skip-jitter", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-ddsperf", action="store_true")
    parser.add_argument("--skip-drift", action="store_true", help="leave out the full trials (drift)")
    parser.add_argument(
        "--drift-parallel",
        type=int,
        default=None,
        help="drift trials at once (default: all, as fieldtest demo)",
    )
    parser.add_argument("--keep", type=Path, help="keep the trial directories here (default: temporary)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument(
        "--reference", type=Path, help="write the drift part's summary here (reference/bench-twin-drift.json)"
    )
    return parser


def _settings(args: argparse.Namespace, cores: tuple[int, int] | None) -> dict:
    parts = [
        name
        for name, skip in (
            ("jitter", args.skip_jitter),
            ("latency", args.skip_latency),
            ("ddsperf", args.skip_ddsperf),
            ("drift", args.skip_drift),
        )
        if not skip
    ]
    return {
        "machine": os.uname().nodename,
        "cores": os.cpu_count(),
        "parts": parts,
        "duration_s": args.duration or (8.0 if args.quick else 32.0),
        "jitter_duration_s": args.jitter_duration or (8.0 if args.quick else 24.0),
        "rates_hz": [float(r) for r in args.rates.split(",") if r],
        "repeat": max(1, args.repeat),
        "sched": [x for x in args.sched.split(",") if x],
        "middlewares": [m for m in args.middlewares.split(",") if m],
        "host_core": cores[0] if cores else None,
        "hog_core": cores[1] if cores else None,
        "ddsperf_rate_hz": args.ddsperf_rate,
        "ddsperf_size": TWIST_STAMPED_CDR_BYTES,
        "drift_plan": "quick plan (2 short laps)" if args.quick else "96 s plan (4 laps)",
        "drift_quick": bool(args.quick),
        "drift_parallel": args.drift_parallel,
        "domain_base": random.randint(100, 180),  # away from 0 and from other kit runs on this machine
    }


def run_jitter(report: Report, work_dir: Path, cores: tuple[int, int] | None) -> None:
    s = report.settings
    domain = s["domain_base"]
    for rate in s["rates_hz"]:
        jobs = [("emit_schedule only", x) for x in s["sched"]] + [("host process", x) for x in s["sched"]]
        for source, sched in jobs:
            say(f"jitter: {source} at {rate:g} Hz, {sched} scheduling, hog on core {s['hog_core']} ...")
            report.jitter.append(measure_jitter(source, rate, sched, s, work_dir, domain, cores))
            domain += 1


def run_latency(report: Report, work_dir: Path) -> None:
    s = report.settings
    for i, middleware in enumerate(s["middlewares"]):
        say(f"latency: {middleware} for {s['duration_s']:g} s ...")
        report.latency.append(
            measure_latency(middleware, s["duration_s"], work_dir, s["domain_base"] + 20 + i)
        )
    if "dds" in s["middlewares"]:
        say("latency: cost of one DDS publish call at 20 Hz ...")
        try:
            report.publish_cost_us = dds_publish_cost_us(work_dir, s["domain_base"] + 35)
        except BenchError as exc:
            say(str(exc))


def run_ddsperf(report: Report) -> None:
    s = report.settings
    say(f"reference: ddsperf ping/pong at {s['ddsperf_rate_hz']:g} Hz for {s['duration_s']:g} s ...")
    try:
        with measured_load() as load:
            result = run_pingpong(
                s["ddsperf_rate_hz"], TWIST_STAMPED_CDR_BYTES, s["duration_s"], s["domain_base"] + 40
            )
        report.ddsperf = asdict(result.one_way)
        report.ddsperf_load = load.text()
    except DdsperfError as exc:
        report.ddsperf_error = str(exc)


def run(args: argparse.Namespace) -> Report:
    cores = core_pair()
    report = Report(settings=_settings(args, cores))
    bad_sched = sorted(set(report.settings["sched"]) - set(SCHED_VARIANTS))
    if bad_sched:
        raise BenchError(f"unknown --sched {', '.join(bad_sched)} (choose from {', '.join(SCHED_VARIANTS)})")
    unknown = sorted(set(report.settings["middlewares"]) - set(MIDDLEWARES))
    if unknown:
        raise BenchError(f"unknown middleware {', '.join(unknown)} (choose from {', '.join(MIDDLEWARES)})")
    work_dir = args.keep or Path(tempfile.mkdtemp(prefix="bench_twin_"))
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        if "jitter" in report.settings["parts"]:
            run_jitter(report, work_dir, cores)
        if "latency" in report.settings["parts"]:
            run_latency(report, work_dir)
        if "ddsperf" in report.settings["parts"]:
            run_ddsperf(report)
        if "drift" in report.settings["parts"]:
            run_drift(report, work_dir)
    finally:
        if args.keep is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    return report


def run_drift(report: Report, work_dir: Path) -> None:
    """Every middleware's full trial at once, through the trial runner, then each one analyzed."""
    from concurrent.futures import ThreadPoolExecutor

    from fieldtest.analysis import analyze_trial

    s = report.settings
    plan = QUICK_PLAN if s["drift_quick"] else SquarePlan()
    requests = [
        TrialRequest(name=f"bench-drift-{m}", plan=plan, transport={"middleware": m})
        for m in s["middlewares"]
    ]
    at_once = s["drift_parallel"] or len(requests)
    say(f"drift: {len(requests)} full trials, {at_once} at once ({s['drift_plan']}) ...")
    out = work_dir / "drift"
    with measured_load() as load, ThreadPoolExecutor(at_once) as pool:
        futures = [
            pool.submit(run_twin_trial, r, out, domain_id=s["domain_base"] + 50 + i)
            for i, r in enumerate(requests)
        ]
        results = [f.result() for f in futures]
    report.drift_load = load
    for request, result in zip(requests, results, strict=True):
        report.drift.append(_drift_row(request.transport.middleware, result, analyze_trial))


def _drift_row(middleware: str, result, analyze_trial) -> DriftRow:
    row = DriftRow(middleware, result.end_reason)
    if result.end_reason != "completed":
        row.error = result.detail
        return row
    try:
        metrics = analyze_trial(result.trial_dir, plots=False)
    except Exception as exc:  # one line in the table, the other rows still count
        row.error = f"analysis failed: {exc}"
        return row
    drift, link = metrics.drift, metrics.latency
    if drift.available:
        row.drift_mm = drift.mean_m * 1e3
        row.at_lap_end_mm = drift.at_lap_end_m * 1e3
        row.heading_change_deg = drift.heading_change_deg
    if metrics.stack is not None:
        row.valid, row.invalid_reasons = metrics.stack.valid, list(metrics.stack.invalid_reasons)
    row.received, row.sent = link.commands_received or 0, link.commands_sent or 0
    one_way = link.one_way_ms
    row.latency_p50_ms, row.latency_p99_ms = (one_way.median, one_way.p99) if one_way else (None, None)
    cpu = read_trial(result.trial_dir).outcome.cpu
    row.cpu_percent = {name: figures["cpu_percent"] for name, figures in cpu.items()}
    return row


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = run(args)
    except BenchError as exc:
        print(f"bench_twin: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2) + "\n")
    if args.reference and report.drift and report.drift_load is not None:
        write_reference(args.reference, drift_reference(report, args.reference, argv))
    return 0


def drift_reference(report: Report, path: Path, argv: list[str] | None) -> TwinTrialsSummary:
    """The drift part as docs/benchmarks.md quotes it (reference/, fieldtest.testkit.docblocks)."""
    assert report.drift_load is not None
    conditions = load_conditions([report.drift_load])
    rows = [
        TwinTrialRow(
            middleware=r.middleware,
            network="loopback",
            plan=report.settings["drift_plan"],
            end_reason=r.end_reason,
            valid=r.valid,
            invalid_reasons=r.invalid_reasons,
            drift_mm=r.drift_mm,
            received=r.received,
            sent=r.sent,
            latency_p50_ms=r.latency_p50_ms,
            latency_p99_ms=r.latency_p99_ms,
            error=r.error or None,
            conditions=conditions,
        )  # fmt: skip
        for r in report.drift
    ]
    given = sys.argv[1:] if argv is None else argv
    return TwinTrialsSummary(
        kind="twin-trials", name=path.stem,
        command=" ".join(["nice -n 10 .venv/bin/python benchmarks/bench_twin.py", *given]),
        measured_utc=utc_now(), machine=machine_text(), versions=software_versions(),
        settings={"parts": ["drift"], "plan": report.settings["drift_plan"],
                  "trials_at_once": report.settings["drift_parallel"] or len(report.drift),
                  "middlewares": list(report.settings["middlewares"])},
        rows=rows,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
