"""The lifecycle every runner shares: the twin runner (``fieldtest.runner``: ``fieldtest trial``,
``demo``, ``campaign``), the lab runner (``fieldtest.labrun.orchestration.labrunner``: ``fieldtest lab
run``, ``lab rehearse``) and the two perf runners (``fieldtest.perf.cli``: ``fieldtest perf``;
``fieldtest.perf.labperf``: ``fieldtest lab perf``). Each supplies its own processes and results.

A run: the stop signals (SIGINT, SIGTERM, SIGHUP) set one stop event (``procs.run_stop_event``)
that spans the trials or rows and the write of their results (a trial's analysis, a perf run's
files), so a signal while they are written lets the write finish. Each trial or row:

1. ``open_record`` (trials): ``trial.yaml`` with the request, software versions and plan warnings;
2. ``start_in_order``: the processes (a trial's robot before its host; a perf row's relays before
   its main side); once the stop event is set no further one starts (``Interrupted``);
3. the run: the caller's loop raises ``Interrupted`` when the stop event is set
   (``raise_if_stopped``);
4. stop, on every way out (the caller's: a trial's host first, so its stop burst reaches a robot
   that still listens; a perf row's main side, relays, then bridges); after a completed trial run
   ``record_rest_after_run`` keeps the recording going until it holds the rest after the planned
   end that the drift's closing reads (bounded: a lagging or dead source cannot hang it);
5. ``finish_record`` (trials): end reason, CPU, the caller's outcome fields, cut-off bags repaired;
6. ``analyze`` (trials): metrics.json and the report, one line if the trial cannot be analyzed.
   A perf run writes its rows' files instead (``fieldtest.perf.results``): the finished rows; a
   row a stop signal cut short is left out of them, its records stay in its folder.

A run ends with ``not_run`` (the trials or rows a stop signal left unrun, announced) and
``exit_code``/``run_exit_code`` (130 after a stop signal, as for Ctrl-C, whichever signal it was
and whatever the trials' or rows' outcomes).
"""

from __future__ import annotations

import operator
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fieldtest.plan import REST_AFTER_S, SquarePlan
from fieldtest.procs import interruption
from fieldtest.record import (
    ANALYSIS_DIR,
    HOST_BAG,
    MOCAP_BAG,
    ROBOT_BAG,
    TrialRecord,
    TrialRequest,
    read_bag,
    read_trial,
    repair_bag,
    software_versions,
    write_trial,
)

if TYPE_CHECKING:
    from fieldtest.analysis import Metrics
    from fieldtest.record.trial import EndReason

HOST_KILLED_CODES = (-signal.SIGKILL, 137)  # no stop burst from it
HOST_STOPPED_CODES = (130, 143, -signal.SIGINT, -signal.SIGTERM)  # stopped after its stop burst
EXIT_INTERRUPTED = 130  # as for SIGINT
# How long after the host's end the recording may wait for the rest after the run: a loaded
# machine's robot side lagged the host by seconds; a source that is further behind counts as dead,
# and so does a ground truth whose tracked frames stopped arriving this long ago.
REST_RECORDING_LIMIT_S = 20.0
MOCAP_SILENT_S = 3.0
REST_POLL_S = 0.1


@dataclass
class TrialResult:
    trial_dir: Path
    end_reason: EndReason
    detail: str = ""


class Interrupted(Exception):
    """A stop signal arrived (the run's stop event): end the trial or row as an interruption."""


def open_record(trial_dir: Path, request: TrialRequest) -> TrialRecord:
    """The trial's record before anything starts (not yet written: the caller adds its fields)."""
    record = TrialRecord(trial_id=trial_dir.name, request=request)
    record.outcome.software = software_versions()
    record.outcome.warnings = list(request.plan.warnings())
    return record


def stopped(stop: threading.Event | None) -> bool:
    """Has a stop signal (the run's stop event) arrived."""
    return stop is not None and stop.is_set()


def raise_if_stopped(stop: threading.Event | None) -> None:
    """Raise ``Interrupted`` once ``stop`` is set."""
    if stopped(stop):
        raise Interrupted


def start_in_order(steps: Iterable[Callable[[], None]], stop: threading.Event | None) -> None:
    """Run the start steps in order; raise ``Interrupted`` instead of the next one once ``stop``
    is set, so a signal during the start-up starts no further process (neither a trial's robot
    nor its host, no perf row's main side)."""
    for step in steps:
        raise_if_stopped(stop)
        step()


def host_exit_kind(code: int | None) -> EndReason:
    """What the host's exit code says: completed, host-killed, host-stopped, or error."""
    if code == 0:
        return "completed"
    if code in HOST_KILLED_CODES:
        return "host-killed"
    if code in HOST_STOPPED_CODES:
        return "host-stopped"
    return "error"


@dataclass(frozen=True)
class RecordingProgress:
    """How far a trial's recording got, by its own stamps (host clock, ns)."""

    mocap_running: bool = False  # False: no ground truth to wait for (none recorded, or its recorder stopped)
    mocap_moved_ns: int | None = None  # the ground truth first saw the robot move
    mocap_last_ns: int | None = None  # the latest tracked frame
    robot_stop_logged: bool = True  # the robot side logged the host's stop burst (or cannot any more)


def rest_window_end_ns(plan: SquarePlan, moved_ns: int | None, stream_start_ns: int | None) -> int | None:
    """When the rest after the planned end is over on the ground truth's stamps: the analysis counts
    the laps from the motion start it finds there (the recording's first move; it finds the start a
    little earlier), else from the plan's first moving command."""
    start = moved_ns
    if start is None and stream_start_ns is not None:
        start = stream_start_ns + round(plan.start_delay_s * 1e9)
    return None if start is None else start + round((plan.motion_s + REST_AFTER_S[1]) * 1e9)


def rest_missing(progress: RecordingProgress, plan: SquarePlan, stream_start_ns: int | None) -> str:
    """What the recording still lacks of the rest after the run ('' once it holds it)."""
    missing = []
    end_ns = rest_window_end_ns(plan, progress.mocap_moved_ns, stream_start_ns)
    if progress.mocap_running and end_ns is not None:
        last = progress.mocap_last_ns
        if last is None or last < end_ns:
            short = "no tracked frame" if last is None else f"{(end_ns - last) / 1e9:.2f} s short"
            missing.append(f"ground truth {short} of the rest {REST_AFTER_S[1]:g} s after the planned end")
    if not progress.robot_stop_logged:
        missing.append("the robot side has not logged the stop burst")
    return "; ".join(missing)


def record_rest_after_run(
    progress: Callable[[], RecordingProgress],
    plan: SquarePlan,
    stream_start_ns: int | None,
    stop: threading.Event | None = None,
    limit_s: float = REST_RECORDING_LIMIT_S,
) -> str:
    """Wait, the recording going on, until ``progress()`` holds the rest after the planned end (the
    drift's closing reads the robot's rest pose there). Returns '' then, or a note for the record
    when ``limit_s`` or a stop signal ended the wait first. Call it after the host's stop burst:
    the robot must not be left moving while the recording goes on."""
    deadline = time.monotonic() + limit_s
    while True:
        state = progress()
        missing = rest_missing(state, plan, stream_start_ns)
        if not missing:
            return ""
        silent = state.mocap_running and (
            state.mocap_last_ns is None or time.time_ns() - state.mocap_last_ns > MOCAP_SILENT_S * 1e9
        )
        if silent or time.monotonic() >= deadline:
            why = (
                f"no tracked frame for {MOCAP_SILENT_S:g} s"
                if silent
                else f"{limit_s:g} s after the host's end"
            )
            return (
                f"the recording stopped ({why}) without the rest after the run ({missing}): "
                "the drift's closing is taken at the end of the last lap"
            )
        if stop is not None and stop.wait(REST_POLL_S):
            return (
                f"the recording stopped for {interruption(stop)} without the rest after the run ({missing})"
            )
        if stop is None:
            time.sleep(REST_POLL_S)


def finish_record(
    trial_dir: Path, reason: EndReason, detail: str, cpu: dict, fill: Callable[[TrialRecord], None]
) -> None:
    """The outcome in ``trial.yaml``: end reason, CPU, the runner's own fields (``fill``), and the
    bags a stopped process cut off mid-write repaired (a warning each)."""
    record = read_trial(trial_dir)  # the robot and host may have added their own outcome fields
    outcome = record.outcome
    outcome.end_reason, outcome.end_detail = reason, detail
    outcome.cpu = cpu
    fill(record)
    for bag in (HOST_BAG, ROBOT_BAG, MOCAP_BAG):
        if (trial_dir / bag).exists() and read_bag(trial_dir / bag).truncated:
            repair_bag(trial_dir / bag)
            outcome.warnings.append(f"{bag} bag was cut off mid-write and repaired up to the cut")
    write_trial(trial_dir, record)


def analyze(trial_dir: Path, say: Callable[[str], None], plots: bool = True) -> Metrics | None:
    """metrics.json, report.md and (``plots``) the PNG plots; the metrics read back through the
    schema. A trial that cannot be analyzed gets one line and None: the recording is safe,
    ``fieldtest analyze`` re-runs."""
    from fieldtest.analysis import METRICS_FILE, analyze_trial, read_metrics

    try:
        analyze_trial(trial_dir, plots=plots)
        return read_metrics(trial_dir / ANALYSIS_DIR / METRICS_FILE)
    except ValueError as exc:  # AnalysisError, TrialFormatError, BagError: one line naming the file
        say(f"{trial_dir.name}: not analyzed: {str(exc).splitlines()[0]}")
    except Exception as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        say(f"{trial_dir.name}: analysis failed ({why}); re-run: fieldtest analyze {trial_dir}")
    return None


Planned = TypeVar("Planned")


def not_run(
    planned: Sequence[Planned],
    done: int,
    stop: threading.Event | None,
    say: Callable[[str], None],
    name: Callable[[Planned], str] | None = None,
) -> list[Planned]:
    """The trials or rows that ran (the first ``done``); the rest, which a stop signal left,
    announced by ``name`` (default: a trial request's name)."""
    left = planned[done:]
    if left:
        named = name or operator.attrgetter("name")
        say(f"not run ({interruption(stop)}): {', '.join(named(p) for p in left)}")
    return list(planned[:done])


def run_exit_code(succeeded: bool, stop: threading.Event | None) -> int:
    """130 (as for SIGINT) after a stop signal, whichever signal and whatever else happened;
    else 0 if the run ``succeeded``, 1 if not."""
    if stopped(stop):
        return EXIT_INTERRUPTED
    return 0 if succeeded else 1


def exit_code(results: list[TrialResult], stop: threading.Event | None) -> int:
    """0 if every trial completed, 130 (as for SIGINT) after a stop signal or an interrupted
    trial, else 1."""
    if any(r.end_reason == "interrupted" for r in results):
        return EXIT_INTERRUPTED
    return run_exit_code(bool(results) and all(r.end_reason == "completed" for r in results), stop)
