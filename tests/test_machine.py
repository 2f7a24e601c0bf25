"""The machine monitor: /proc counters read right, and its reference timer sees a stall."""

import sys
import time

import pytest

from fieldtest import machine
from fieldtest.machine import MachineMonitor, describe, read_cpu
from fieldtest.netem.disturbance import probe_allowance

STAT = """cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
intr 1
procs_running {running}
procs_blocked 0
"""


def _write_stat(path, user, system, idle, steal, running=1):
    path.write_text(STAT.format(user=user, system=system, idle=idle, steal=steal, running=running))


def test_steal_busy_and_run_queue_come_from_the_cpu_line(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    monkeypatch.setattr(machine, "PROC_STAT", stat)
    monkeypatch.setattr(machine, "PROC_PRESSURE_CPU", tmp_path / "absent")
    _write_stat(stat, user=100, system=0, idle=100, steal=0)
    first = read_cpu()
    assert (first.total_ticks, first.idle_ticks, first.steal_ticks, first.pressure_some_us) == (
        200,
        100,
        0,
        None,
    )
    monitor = MachineMonitor(period_s=0.002, sample_s=10.0)
    monitor.start()
    # over the window: 60 ticks user, 20 idle, 20 steal, 5 runnable
    _write_stat(stat, user=160, system=0, idle=120, steal=20, running=5)
    time.sleep(0.05)
    report = monitor.stop()
    assert report["steal_pct"] == pytest.approx(20.0)
    assert report["busy_pct"] == pytest.approx(80.0)
    assert report["procs_running_max"] == 5
    assert report["cpu_pressure_pct"] is None
    assert report["timer_wakeups"] > 0  # the reference timer ran (how often depends on the machine)
    assert "steal 20.0 %" in describe(report)


def test_cpu_pressure_is_the_share_of_wall_time_stalled(tmp_path, monkeypatch):
    pressure = tmp_path / "cpu"
    monkeypatch.setattr(machine, "PROC_PRESSURE_CPU", pressure)
    pressure.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\nfull avg10=0 total=0\n")
    monitor = MachineMonitor(period_s=0.002, sample_s=10.0)
    monitor.start()
    time.sleep(0.2)
    pressure.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=101000\nfull avg10=0 total=0\n")
    report = monitor.stop()
    # 100 ms stalled over the window, whatever its length on a busy machine
    assert report["cpu_pressure_pct"] == pytest.approx(100 * 0.1 / report["duration_s"], rel=1e-6)


def test_reference_timer_sees_a_stall_of_its_process():
    """Hold the interpreter lock for 150 ms: the monitor thread cannot wake, and must say so."""
    old = sys.getswitchinterval()
    with MachineMonitor(period_s=0.002) as monitor:
        time.sleep(0.05)
        sys.setswitchinterval(1.0)
        try:
            end = time.monotonic() + 0.15
            while time.monotonic() < end:
                pass
        finally:
            sys.setswitchinterval(old)
        time.sleep(0.05)
    report = monitor.report()
    assert report["timer_late_max_ms"] >= 100.0, describe(report)
    assert report["timer_late_p50_ms"] < report["timer_late_max_ms"]


def test_probe_allowance_adds_each_hop_that_must_wake():
    report = {"timer_late_p90_ms": 0.5, "steal_pct": 3.0, "steal_max_pct": 30.0, "busy_pct": 90.0}
    forwarder = {"a2b": {"late_p90_us": 200}, "b2a": {"late_p90_us": 1000}}
    allowance = probe_allowance(report, forwarder)
    assert allowance.ab_ms == pytest.approx(1.5)  # downlink (b2a) then the echo server's wake-up
    assert allowance.ba_ms == pytest.approx(0.7)
    assert allowance.rtt_ms == pytest.approx(2.2)
    assert probe_allowance(report, None).rtt_ms == pytest.approx(1.0)  # a plain veth: only the endpoints
