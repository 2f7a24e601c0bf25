"""What the machine itself does to timing while something is measured: CPU steal, run-queue
pressure, and a reference timer's lateness.

A timing figure (a link's delay, a command's send time, a lap's drift) taken on a busy or virtual
machine holds the machine's own disturbance too: the hypervisor takes the cores away (steal in
/proc/stat), other programs queue ahead (/proc/pressure/cpu, procs_running), and every process
that has to wake up to stamp or forward a packet wakes late. ``MachineMonitor`` measures all three
over a window, in the same run as the figure it qualifies, so the figure can be judged against
the machine (docs/analysis.md, "Stack faults and the machine"):

- the reference timer is a thread at normal priority that sleeps ``period_s`` again and again and
  records how late it woke; it is what any ordinary process of the measurement suffers per wake-up;
- steal and busy shares come from the aggregate ``cpu`` line of /proc/stat, per sample interval
  (the largest one-interval steal shows a burst that an average hides);
- CPU pressure is the PSI ``some`` total of /proc/pressure/cpu (the share of wall time in which
  some runnable task waited for a core); None where the kernel has no PSI.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

PROC_STAT = Path("/proc/stat")
PROC_PRESSURE_CPU = Path("/proc/pressure/cpu")
PROC_LOADAVG = Path("/proc/loadavg")
# /proc/stat cpu columns: user nice system idle iowait irq softirq steal guest guest_nice
_STEAL_COLUMN = 7
_IDLE_COLUMNS = (3, 4)


@dataclass(frozen=True)
class CpuSnapshot:
    """One reading of the kernel's counters."""

    t_ns: int
    total_ticks: int  # guest time is already inside user/nice: not added twice
    idle_ticks: int
    steal_ticks: int
    procs_running: int
    pressure_some_us: int | None


def _pressure_some_us() -> int | None:
    try:
        first = PROC_PRESSURE_CPU.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(part.split("=", 1) for part in first.split()[1:] if "=" in part)
    return int(fields["total"]) if "total" in fields else None


def read_cpu() -> CpuSnapshot:
    """The aggregate cpu counters, procs_running and the CPU pressure total, now."""
    cpu_line, running = [], 0
    for line in PROC_STAT.read_text().splitlines():
        if line.startswith("cpu "):
            cpu_line = [int(v) for v in line.split()[1:]]
        elif line.startswith("procs_running "):
            running = int(line.split()[1])
    columns = cpu_line[:8] + [0] * (8 - len(cpu_line[:8]))
    return CpuSnapshot(
        t_ns=time.monotonic_ns(),
        total_ticks=sum(columns),
        idle_ticks=sum(columns[i] for i in _IDLE_COLUMNS),
        steal_ticks=columns[_STEAL_COLUMN],
        procs_running=running,
        pressure_some_us=_pressure_some_us(),
    )


def load_average_1min() -> float | None:
    try:
        return float(PROC_LOADAVG.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _share(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (q in 0..1) of a list; NaN for an empty one."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def lateness_summary(late_ms: list[float]) -> dict[str, Any]:
    """count, p50, p99 and max of a list of lateness values (ms); None figures when it is empty."""
    if not late_ms:
        return {"count": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "count": len(late_ms),
        "p50_ms": round(quantile(late_ms, 0.5), 4),
        "p99_ms": round(quantile(late_ms, 0.99), 4),
        "max_ms": round(max(late_ms), 4),
    }


class MachineReport(TypedDict):
    """What ``MachineMonitor`` measured over its window, as trial records and benchmark results hold
    it (plain JSON: shares in percent, times in ms unless named otherwise)."""

    duration_s: float
    steal_pct: float
    steal_max_pct: float  # the largest one-interval steal: a burst an average hides
    busy_pct: float
    cpu_pressure_pct: float | None  # None: the kernel has no PSI
    procs_running_max: int
    loadavg_1min: float | None
    sample_s: float
    timer_period_ms: float
    timer_wakeups: int
    timer_late_p50_ms: float  # NaN without a wake-up
    timer_late_p90_ms: float
    timer_late_p99_ms: float
    timer_late_max_ms: float


class MachineMonitor:
    """Watch the machine over a window: ``with MachineMonitor() as mon: ...; mon.report()``.

    ``period_s`` is the reference timer's sleep; ``sample_s`` how often /proc is read.
    """

    def __init__(self, period_s: float = 0.005, sample_s: float = 0.5):
        self.period_s = period_s
        self.sample_s = sample_s
        self._stop = threading.Event()
        self._late_ms: list[float] = []
        self._snapshots: list[CpuSnapshot] = []
        self._thread = threading.Thread(target=self._run, name="machine-monitor", daemon=True)
        self._report: MachineReport | None = None

    def __enter__(self) -> MachineMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def started(self) -> bool:
        return bool(self._snapshots)

    def start(self) -> None:
        self._snapshots.append(read_cpu())
        self._thread.start()

    def stop(self) -> MachineReport:
        """End the window (idempotent) and return its report."""
        if self._report is None:
            self._stop.set()
            self._thread.join()
            self._snapshots.append(read_cpu())
            self._report = self._summarize()
        return self._report

    def report(self) -> MachineReport:
        return self.stop()

    def late_quantile_ms(self, q: float) -> float:
        """The reference timer's lateness quantile so far (ms); call after ``stop`` for the window."""
        return quantile(list(self._late_ms), q)

    def _run(self) -> None:
        period_ns = round(self.period_s * 1e9)
        next_sample = time.monotonic_ns() + round(self.sample_s * 1e9)
        while not self._stop.is_set():
            due = time.monotonic_ns() + period_ns
            time.sleep(self.period_s)
            now = time.monotonic_ns()
            self._late_ms.append(max(0, now - due) / 1e6)
            if now >= next_sample:
                self._snapshots.append(read_cpu())
                next_sample = now + round(self.sample_s * 1e9)

    def _summarize(self) -> MachineReport:
        first, last = self._snapshots[0], self._snapshots[-1]
        total = last.total_ticks - first.total_ticks
        steals = [
            _share(b.steal_ticks - a.steal_ticks, b.total_ticks - a.total_ticks)
            for a, b in zip(self._snapshots, self._snapshots[1:], strict=False)
            if b.total_ticks > a.total_ticks
        ]
        wall_us = (last.t_ns - first.t_ns) / 1e3
        pressure = None
        if first.pressure_some_us is not None and last.pressure_some_us is not None and wall_us > 0:
            pressure = min(1.0, (last.pressure_some_us - first.pressure_some_us) / wall_us)
        late = self._late_ms
        return {
            "duration_s": (last.t_ns - first.t_ns) / 1e9,
            "steal_pct": 100 * _share(last.steal_ticks - first.steal_ticks, total),
            "steal_max_pct": 100 * max(steals, default=0.0),
            "busy_pct": 100 * (1 - _share(last.idle_ticks - first.idle_ticks, total)),
            "cpu_pressure_pct": None if pressure is None else 100 * pressure,
            "procs_running_max": max(s.procs_running for s in self._snapshots),
            "loadavg_1min": load_average_1min(),
            "sample_s": self.sample_s,
            "timer_period_ms": self.period_s * 1e3,
            "timer_wakeups": len(late),
            "timer_late_p50_ms": quantile(late, 0.5),
            "timer_late_p90_ms": quantile(late, 0.9),
            "timer_late_p99_ms": quantile(late, 0.99),
            "timer_late_max_ms": max(late, default=math.nan),
        }


def describe(report: MachineReport) -> str:
    """One line for a log or an assertion message."""
    pressure = report.get("cpu_pressure_pct")
    pressure_text = "" if pressure is None else f", CPU pressure {pressure:.0f} %"
    return (
        f"machine over {report['duration_s']:.1f} s: steal {report['steal_pct']:.1f} % "
        f"(max {report['steal_max_pct']:.0f} % in {report['sample_s']:g} s), "
        f"busy {report['busy_pct']:.0f} %{pressure_text}, load {report['loadavg_1min']}, "
        f"reference timer late p50 {report['timer_late_p50_ms']:.2f} / p90 {report['timer_late_p90_ms']:.2f} "
        f"/ max {report['timer_late_max_ms']:.1f} ms"
    )
