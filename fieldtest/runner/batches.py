"""Batches and re-runs: trials side by side as far as the machine's free cores allow, their
analysis, and invalid trials re-run alone; one stop event (``procs.run_stop_event``) spans it all."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.lifecycle import TrialResult, analyze
from fieldtest.machine import MachineMonitor, MachineReport
from fieldtest.procs import interruption, run_stop_event
from fieldtest.record import TrialRequest
from fieldtest.runner.twintrial import run_twin_trial
from fieldtest.runner.verdict import invalid_trials

if TYPE_CHECKING:
    from fieldtest.analysis import Metrics

TRIAL_CORES = (
    0.5  # a twin trial's processes need about this much of a core (quick runs: 0.3, docs/benchmarks.md)
)
HEADROOM_SAMPLE_S = 1.0


def run_with_progress(requests: list[TrialRequest], out: Path, stop: threading.Event) -> list[TrialResult]:
    """Run trials side by side (one thread each), with one progress bar per trial. ``stop`` (Ctrl-C,
    SIGTERM or SIGHUP: ``procs.run_stop_event``) stops every trial (each host sends its stop burst);
    returns what they recorded."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description:<36}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as bar, ThreadPoolExecutor(max_workers=len(requests)) as pool:
        tasks = [bar.add_task(r.name, total=1.0) for r in requests]

        def progress(task: TaskID) -> Callable[[float], None]:
            return lambda fraction: bar.update(task, completed=fraction)

        futures = [
            pool.submit(run_twin_trial, r, out, progress(t), domain_id=i + 1, stop=stop)
            for i, (r, t) in enumerate(zip(requests, tasks, strict=True))
        ]
        pending, announced = set(futures), False
        while pending:
            _, pending = wait(pending, timeout=0.2)
            if stop.is_set() and not announced:
                bar.console.print(
                    f"{interruption(stop)}: stopping every trial (the hosts send their stop bursts) ..."
                )
                announced = True
        return [f.result() for f in futures]


def analyze_all(results: list[TrialResult]) -> list[Metrics | None]:
    """Analyze each trial (metrics.json, report.md, plots); the metrics of each, in order, read
    back through the schema. A trial with nothing to analyze (stopped before it streamed) gets its
    one-line reason and None."""
    return [analyze(result.trial_dir, say_on_stderr) for result in results]


def say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def parallel_from_headroom(wanted: int, machine: MachineReport, cores: int) -> int:
    """How many trials to run at once: the cores left free (minus what the hypervisor steals)
    divided by what one trial needs; at least 1, at most ``wanted``."""
    free = cores * (1.0 - (machine["busy_pct"] + machine["steal_pct"]) / 100.0)
    return max(1, min(wanted, int(free // TRIAL_CORES)))


def choose_parallel(arg: str, wanted: int) -> int:
    if arg != "auto":
        return max(1, int(arg))
    monitor = MachineMonitor()
    monitor.start()
    time.sleep(HEADROOM_SAMPLE_S)
    machine = monitor.stop()
    parallel = parallel_from_headroom(wanted, machine, os.cpu_count() or 1)
    print(
        f"running {parallel} trial(s) at once: cores {machine['busy_pct']:.0f} % busy, steal "
        f"{machine['steal_pct']:.1f} % over {HEADROOM_SAMPLE_S:g} s (--parallel N to choose)",
        file=sys.stderr,
    )
    return parallel


def any_interrupted(results: list[TrialResult]) -> bool:
    return any(r.end_reason == "interrupted" for r in results)


def run_batches(
    requests: list[TrialRequest], out: Path, parallel: int, stop: threading.Event
) -> list[TrialResult]:
    """Results in request order; after an interruption no further batch starts, so the list can be
    shorter than ``requests``."""
    results: list[TrialResult] = []
    for start in range(0, len(requests), parallel):
        if stop.is_set():
            break
        results += run_with_progress(requests[start : start + parallel], out, stop)
    return results


def run_and_rerun(
    requests: list[TrialRequest], out: Path, parallel: int, reruns: int, stop: threading.Event | None = None
) -> tuple[list[TrialResult], list[Metrics | None], list[TrialResult], int]:
    """Run, analyze, and re-run each invalid trial up to ``reruns`` times, one at a time (the
    machine was too busy for it). Returns (kept results, their metrics, every result, re-runs).
    An interruption (``stop``: the stop signals set it) ends the run: the results then cover only
    the first requests, and nothing is re-run. A stop signal during the analysis lets it finish."""
    with run_stop_event(stop) as stop:
        results = run_batches(requests, out, parallel, stop)
        metrics = analyze_all(results)
        every, count = list(results), 0
        for _ in range(reruns):
            todo = invalid_trials(metrics)
            if not todo or stop.is_set():
                break
            print(f"re-running {len(todo)} invalid trial(s) one at a time ...", file=sys.stderr)
            for i in todo:
                if stop.is_set():
                    break
                (again,) = run_with_progress([requests[i]], out, stop)
                (again_metrics,) = analyze_all([again])
                every.append(again)
                count += 1
                if any_interrupted([again]):
                    break  # the invalid trial stays the kept one
                results[i], metrics[i] = again, again_metrics
    return results, metrics, every, count
