"""Campaign trials on the workers of a Dask cluster (``fieldtest campaign FILE --cluster ADDRESS``).

Dask does the scheduling, placement, retries and transport: each trial is one task
(``run_trial_on_worker``) asking for the resources ``clusterworker.trial_needs`` names; a worker
lost mid-trial makes Dask run that task again on another worker. What the kit adds:

- the trial runs on the worker exactly as on this machine (``run_twin_trial`` in the worker's
  scratch folder, then its analysis), its record naming the worker, its machine and the kit;
- the whole trial directory comes back as the task's result, a tar archive, and enters the
  campaign's folder by one rename: an attempt cut short by a lost worker never arrives, and a
  directory is never seen half unpacked;
- progress: each task reports its fraction as a Dask event (``Worker.log_event``), shown per trial
  with the worker running it;
- Ctrl-C (any run stop signal) sets a Dask ``Event`` that every running task watches: each trial
  stops as a local one does (the host first, with its stop burst) and comes home; tasks not yet
  started return without running;
- a worker that loses its scheduler (Dask then closes the worker) stops its running trials the same
  way and keeps each in ``UNSHIPPED`` beside its local directory, since no one can receive it;
- a worker given up by the scheduler (a cut link: no heartbeat for the scheduler's worker TTL) has
  its trial re-run elsewhere; nothing the cut worker sends reaches the campaign (it is no longer
  one of the scheduler's workers), and it closes, keeping an attempt it was still running as above.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldtest.errors import FieldtestError
from fieldtest.lifecycle import TrialResult, analyze
from fieldtest.procs import interruption, run_stop_event
from fieldtest.record import ANALYSIS_DIR, TrialRequest, read_trial, write_trial
from fieldtest.runner.clusterworker import (
    CAPABILITIES,
    FACTS_ENV,
    TRIAL_SLOT,
    kit_resource,
    kit_version,
    machine_facts,
    trial_needs,
)
from fieldtest.runner.twintrial import run_twin_trial
from fieldtest.runner.verdict import invalid_trials

if TYPE_CHECKING:
    from distributed import Client, Future, Worker

    from fieldtest.analysis import Metrics

PROGRESS_TOPIC = "fieldtest-progress"
CONNECT_TIMEOUT_S = 20
PROGRESS_STEP = 0.02  # a worker reports its trial's progress in steps of this fraction
STOP_POLL_S = 0.5
INCOMING = ".incoming"  # where a shipped trial is unpacked before its one rename into the campaign
UNSHIPPED = "fieldtest-unshipped"  # on a worker: trials stopped because the scheduler was lost
SCHEDULER_LOST = "stopped: the worker lost its scheduler"


class ClusterError(FieldtestError, RuntimeError):
    """The cluster cannot run the campaign (one line: unreachable, or no worker can run a trial)."""


class KitVersionRefused(ClusterError):
    """A worker runs another kit version than the submitting machine."""


# ------------------------------------------------------------------------------------ on the worker
def run_trial_on_worker(
    request_json: str, home_kit: str, run_id: str, domain_id: int, attempt_tag: str
) -> dict[str, Any]:
    """One trial, run and analyzed on this worker; returns its directory as a tar archive with
    how it ended. A stop (``run_id``'s Dask Event) before it starts: ``{"not_run": True}``."""
    from distributed import Event, get_client, get_worker

    worker = get_worker()
    mine = kit_version()
    if mine != home_kit:
        raise KitVersionRefused(f"worker {worker.name} runs kit {mine}, the campaign {home_kit}")
    stop_event = Event(stop_event_name(run_id), client=get_client())
    request = TrialRequest.model_validate_json(request_json)
    if stop_event.is_set():
        return {"not_run": True, "name": request.name, "worker": str(worker.name)}
    stop, finished = threading.Event(), threading.Event()

    def watch_stop() -> None:
        while not finished.is_set():
            if not _serving(worker):  # the scheduler is gone: Dask is closing this worker
                stop.set()
                return
            try:
                if stop_event.wait(timeout=STOP_POLL_S):
                    stop.set()
                    return
            except Exception:  # no answer from the scheduler: the worker's status tells next round
                time.sleep(STOP_POLL_S)

    watcher = threading.Thread(target=watch_stop, name="cluster-stop-watch", daemon=True)
    watcher.start()
    report = _progress_reporter(worker, run_id, request.name, attempt_tag)
    report(0.0)
    scratch = Path(worker.local_directory) / "fieldtest-trials" / uuid.uuid4().hex
    try:
        result = run_twin_trial(request, scratch, report, domain_id=domain_id, stop=stop)
        _record_worker(result.trial_dir, worker, mine)
        if not _serving(worker):
            _keep_unshipped(result.trial_dir, worker)
            return {"not_run": True, "name": request.name, "worker": str(worker.name)}  # no one to receive it
        said: list[str] = []
        analyze(result.trial_dir, said.append)
        finished.set()
        return {
            "not_run": False,
            "name": request.name,
            "worker": str(worker.name),
            "trial_id": result.trial_dir.name,
            "end_reason": result.end_reason,
            "detail": result.detail,
            "said": said,
            "kit": mine,
            "archive": _archive(result.trial_dir),
        }
    finally:
        finished.set()
        shutil.rmtree(scratch, ignore_errors=True)


def _serving(worker: Worker) -> bool:
    from distributed.core import Status

    return worker.status in (Status.running, Status.paused)


def _keep_unshipped(trial_dir: Path, worker: Worker) -> None:
    """A trial its worker cannot ship (the worker lost its scheduler, or was given up by it, and
    is closing), kept where the closing leaves it (Dask deletes the worker's own directory):
    beside that directory, in ``UNSHIPPED``."""
    record = read_trial(trial_dir)
    if record.outcome.end_reason == "interrupted":  # stopped by the closing, not by Ctrl-C
        record.outcome.end_detail = SCHEDULER_LOST
        write_trial(trial_dir, record)
    kept = Path(worker.local_directory).parents[1] / UNSHIPPED / trial_dir.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(trial_dir, kept)
    print(
        f"worker {worker.name}: {record.request.name} ({record.outcome.end_reason}) not shipped, "
        f"the worker having lost its scheduler; kept, not analyzed, in {kept}",
        flush=True,
    )


def stop_event_name(run_id: str) -> str:
    return f"fieldtest-stop-{run_id}"


def _progress_reporter(worker: Worker, run_id: str, name: str, attempt_tag: str) -> Callable[[float], None]:
    last = [-1.0]

    def report(fraction: float) -> None:
        if fraction - last[0] >= PROGRESS_STEP or (fraction >= 1.0 > last[0]):
            last[0] = fraction
            worker.log_event(
                PROGRESS_TOPIC,
                {"run": run_id, "trial": name, "attempt": attempt_tag, "worker_name": str(worker.name),
                 "fraction": fraction},
            )  # fmt: skip

    return report


def _record_worker(trial_dir: Path, worker: Worker, version: str) -> None:
    """``outcome.worker``: which worker ran the trial, its machine and the kit's version."""
    facts = json.loads(os.environ.get(FACTS_ENV, "{}")) or machine_facts()
    record = read_trial(trial_dir)
    record.outcome.worker = {
        "name": str(worker.name),
        "address": worker.address,
        "kit": version,
        "resources": dict(worker.state.total_resources),
        **facts,
    }
    write_trial(trial_dir, record)


def _archive(trial_dir: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(trial_dir, arcname=trial_dir.name)
    return buffer.getvalue()


# ------------------------------------------------------------------------------ on the submitter
def unpack_home(archive: bytes, trial_id: str, out: Path) -> Path:
    """The shipped trial directory in ``out``, entered by one rename once wholly unpacked."""
    staging = out / INCOMING / uuid.uuid4().hex
    staging.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tar:
            tar.extractall(staging, filter="data")
        unpacked = staging / trial_id
        if not (unpacked / "trial.yaml").is_file():
            raise ClusterError(f"{trial_id}: the shipped archive holds no trial.yaml")
        target = out / trial_id
        os.replace(unpacked, target)
        return target
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            (out / INCOMING).rmdir()  # only when empty: another campaign may be unpacking


@dataclass
class WorkerView:
    """A worker as the scheduler reports it."""

    address: str
    name: str
    resources: dict[str, float]

    def capabilities(self) -> list[str]:
        return [c for c in CAPABILITIES if self.resources.get(c, 0) > 0]

    def kit(self) -> str | None:
        return next((r for r in self.resources if r.startswith("kit-")), None)

    def can_run(self, needs: dict[str, float]) -> bool:
        return all(self.resources.get(name, 0) >= count for name, count in needs.items())


def cluster_workers(client: Client) -> list[WorkerView]:
    info = client.scheduler_info(n_workers=-1)["workers"]
    return [
        WorkerView(address, str(w.get("name", address)), dict(w.get("resources") or {}))
        for address, w in info.items()
    ]


def task_resources(request: TrialRequest, version: str) -> dict[str, float]:
    return {TRIAL_SLOT: 1, kit_resource(version): 1, **{need: 1 for need in trial_needs(request)}}


def check_placement(requests: list[TrialRequest], workers: list[WorkerView], version: str) -> list[str]:
    """Lines about workers this campaign cannot use; ClusterError if a trial has no worker at all."""
    lines = []
    mine = kit_resource(version)
    for w in workers:
        if w.kit() is None:
            lines.append(f"worker {w.name}: not started by `fieldtest cluster worker`: it gets no trials")
        elif w.kit() != mine:
            lines.append(
                f"worker {w.name}: another kit ({str(w.kit()).removeprefix('kit-')}, this machine's "
                f"{mine.removeprefix('kit-')}): refused, it gets no trials (install this kit there)"
            )
    for request in requests:
        needs = task_resources(request, version)
        if not any(w.can_run(needs) for w in workers):
            shown = "; ".join(f"{w.name}: {', '.join(w.capabilities()) or 'none'}" for w in workers)
            wanted = ", ".join(trial_needs(request)) or "nothing special"
            raise ClusterError(
                f"no worker of this kit can run {request.name} (needs {wanted}); workers: {shown or 'none'}"
            )
    return lines


class Board:
    """One progress bar per trial, named with the worker running it (rich)."""

    def __init__(self, requests: list[TrialRequest]):
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description:<36}"),
            TextColumn("{task.fields[worker]:<14}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TimeRemainingColumn(),
        )
        self.tasks = {r.name: self.progress.add_task(r.name, total=1.0, worker="waiting") for r in requests}
        # (trial, round) -> the workers that started it in that round, in order: more than one
        # when a worker was lost mid-trial
        self.workers: dict[tuple[str, str], list[str]] = {}
        self.lock = threading.Lock()

    def event(self, run_id: str, message: dict[str, Any]) -> None:
        if message.get("run") != run_id or message.get("trial") not in self.tasks:
            return
        name, worker = message["trial"], message["worker_name"]  # the scheduler sets "worker" itself
        with self.lock:
            started = self.workers.setdefault((name, message["attempt"]), [])
            if worker in started[:-1]:
                return  # late news from a worker given up since: its attempt is not the trial's
            if not started or started[-1] != worker:
                started.append(worker)
        self.progress.update(self.tasks[name], completed=message["fraction"], worker=worker)

    def lost_workers(self, name: str, tag: str) -> list[str]:
        """The workers that started this round of the trial before the one that finished it."""
        return self.workers.get((name, tag), [])[:-1]

    def say(self, line: str) -> None:
        self.progress.console.print(line, soft_wrap=True)  # one line, whatever the terminal's width


@dataclass
class Round:
    """What one round of submitted trials brought home, by request index."""

    results: dict[int, TrialResult] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    scheduler_lost: bool = False


class ClusterCampaign:
    """A campaign's trials on a Dask cluster, from this (the submitting) machine."""

    def __init__(self, client: Client, out: Path, stop: threading.Event, address: str):
        from distributed import Event

        self.client = client
        self.address = address
        self.out = out
        self.stop = stop
        self.version = kit_version()
        self.run_id = uuid.uuid4().hex[:12]
        self.stop_event = Event(stop_event_name(self.run_id), client=client)
        self.stop_sent = False

    def run_round(self, indexed: list[tuple[int, TrialRequest]], board: Board, tag: str) -> Round:
        """Submit each trial, wait for every one, bring each home whole (or say why not)."""
        futures: dict[Future, int] = {}
        requests = dict(indexed)
        for i, request in indexed:
            future = self.client.submit(
                run_trial_on_worker,
                # the fields the campaign set, only: the worker's twin defaults then fill the rest as
                # this machine's would (Zenoh's bridged path, for one)
                request.model_dump_json(exclude_unset=True),
                self.version,
                self.run_id,
                i + 1,
                tag,
                key=f"fieldtest-{self.run_id}-{tag}-{i}-{request.name}",
                resources=task_resources(request, self.version),
                priority=-i,  # the campaign's order (interleaved, grouped, shuffled) is kept
                pure=False,
            )
            futures[future] = i
        done = Round()
        while futures:
            if self.stop.is_set() and not self.stop_sent:
                board.say(
                    f"{interruption(self.stop)}: stopping every trial on every worker "
                    "(each host sends its stop burst) ..."
                )
                self.stop_event.set()
                self.stop_sent = True
            for future in [f for f in futures if f.done()]:
                i = futures.pop(future)
                try:
                    self._collect(future, requests[i], i, board, tag, done)
                except Exception:
                    if self.client.status == "running":
                        raise
                    done.scheduler_lost = True  # Dask cancels every future the scheduler held
            if futures and self.client.status not in ("running", "newly-created"):
                done.scheduler_lost = True  # (the futures' cancelling follows)
            time.sleep(0.2)
        if done.scheduler_lost:
            board.say(
                f"the scheduler at {self.address} was lost: the {len(done.results)} trial(s) that came "
                "home are kept; each worker stops its running trial (the host sends its stop burst) "
                f"and keeps it in its {UNSHIPPED} folder; the rest are not run"
            )
        return done

    def _collect(
        self, future: Future, request: TrialRequest, i: int, board: Board, tag: str, done: Round
    ) -> None:
        if future.status == "cancelled" and self.client.status != "running":
            raise ClusterError(f"{request.name}: cancelled, the scheduler lost")
        if future.status != "finished":
            why = future.exception() if future.status == "error" else future.status
            line = f"{request.name}: not brought home ({type(why).__name__}: {why})"
            if type(why).__name__ == "KilledWorker":
                line = f"{request.name}: lost with its workers again and again ({why}); not re-run"
            board.say(line)
            done.said.append(line)
            return
        payload = future.result()
        if payload["not_run"]:
            return
        if payload["kit"] != self.version:  # placement already keeps other kits away
            board.say(f"{request.name}: refused: worker {payload['worker']} ran kit {payload['kit']}")
            return
        trial_dir = unpack_home(payload["archive"], payload["trial_id"], self.out)
        lost = board.lost_workers(request.name, tag)
        note = f" (re-run: {', '.join(lost)} lost mid-trial)" if lost else ""
        board.say(f"{request.name}: {payload['end_reason']} on {payload['worker']}{note}")
        for line in payload["said"]:
            board.say(f"  {payload['worker']}: {line}")
        done.results[i] = TrialResult(trial_dir, payload["end_reason"], payload["detail"])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stop_event.clear()


def home_metrics(trial_dir: Path) -> Metrics | None:
    """The metrics the worker's analysis wrote into the shipped directory, if any."""
    from fieldtest.analysis import METRICS_FILE, read_metrics

    path = trial_dir / ANALYSIS_DIR / METRICS_FILE
    return read_metrics(path) if path.is_file() else None


def connect(address: str) -> Client:
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(
            "--cluster needs Dask distributed on this machine: pip install -e '.[cluster]' "
            "(tools/install.sh installs it)"
        ) from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except OSError as exc:
        raise ClusterError(f"cannot reach the scheduler at {address}: {exc}") from None


@dataclass
class ClusterRun:
    """What a campaign on the cluster brought home, in the campaign's order."""

    ran: list[TrialRequest]  # the requests whose trials came home
    results: list[TrialResult]  # their kept results (a valid re-run replaces an invalid trial)
    metrics: list[Metrics | None]
    every: list[TrialResult]  # every trial that came home, re-runs included
    reruns: int
    scheduler_lost: bool


def run_on_cluster(
    requests: list[TrialRequest], out: Path, address: str, reruns: int, stop: threading.Event | None = None
) -> ClusterRun:
    """The campaign's trials on the cluster at ``address``, their invalid ones re-run up to
    ``reruns`` times on any worker."""
    out.mkdir(parents=True, exist_ok=True)
    with run_stop_event(stop) as stop, connect(address) as client:
        campaign = ClusterCampaign(client, out, stop, address)
        workers = cluster_workers(client)
        for line in check_placement(requests, workers, campaign.version):
            print(line, file=sys.stderr)
        print(
            f"cluster {address}: {len(workers)} worker(s): "
            + "; ".join(
                f"{w.name} ({int(w.resources.get(TRIAL_SLOT, 0))} at once: {', '.join(w.capabilities()) or 'loopback only'})"
                for w in workers
            ),
            file=sys.stderr,
        )
        board = Board(requests)
        client.subscribe_topic(PROGRESS_TOPIC, lambda event: board.event(campaign.run_id, event[1]))
        try:
            with board.progress:
                first = campaign.run_round(list(enumerate(requests)), board, "run")
                kept = dict(first.results)
                every = [first.results[i] for i in sorted(first.results)]
                metrics = {i: home_metrics(r.trial_dir) for i, r in kept.items()}
                count, lost = 0, first.scheduler_lost
                for attempt in range(reruns):
                    order = sorted(kept)
                    todo = [order[j] for j in invalid_trials([metrics[i] for i in order])]
                    if not todo or stop.is_set() or lost:
                        break
                    board.say(f"re-running {len(todo)} invalid trial(s) on any worker ...")
                    again = campaign.run_round([(i, requests[i]) for i in todo], board, f"rerun{attempt + 1}")
                    lost = again.scheduler_lost
                    for i, result in sorted(again.results.items()):
                        every.append(result)
                        count += 1
                        if result.end_reason != "interrupted":
                            kept[i], metrics[i] = result, home_metrics(result.trial_dir)
        finally:
            if client.status == "running":
                client.unsubscribe_topic(PROGRESS_TOPIC)
                campaign.close()
            else:  # the one line said it: not Dask's tracebacks of its reconnecting, cut short
                logging.getLogger("distributed").setLevel(logging.CRITICAL)
    order = sorted(kept)
    ran, results = [requests[i] for i in order], [kept[i] for i in order]
    return ClusterRun(ran, results, [metrics[i] for i in order], every, count, lost)
