"""A lab's Dask cluster on one machine, set up as docs/cluster.md says.

``LabCluster`` puts the scheduler, each worker and the submitting machine in network namespaces
of their own on the kit's emulated lab network (``fieldtest.netem.Topology``, wired), so that they
talk TCP across the namespaces as a lab's machines do across its switch. It runs the guide's own
marked steps (``<!-- lab-step: NAME -->`` in docs/cluster.md): each machine's firewall, the
scheduler, the workers and the campaign, with the guide's example address replaced by the
scheduler namespace's, a worker's name by its own, and the options a test adds (``--trials``, a
scratch folder of its own), and the scheduler's worker TTL shortened to the test's. A worker may
run another kit: a copy of this one with one file changed, imported through PYTHONPATH; ``hooks``
is a folder put first on every worker's PYTHONPATH (a test's ``sitecustomize``). The test can
kill a worker or the scheduler, and cut a worker's link at the lab's switch. Needs root
(namespaces, nftables).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from fieldtest.errors import FieldtestError
from fieldtest.netem.topology import Topology
from fieldtest.testkit.guide import adapted, guide_steps

KIT_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_GUIDE = KIT_ROOT / "docs" / "cluster.md"
EXAMPLE_SCHEDULER = "192.168.1.40"
EXAMPLE_WORKER_NAME = "--name lab-pc-1"
EXAMPLE_CAMPAIGN = "trials/twin-networks.yaml"
EXAMPLE_WORKER_TTL = "WORKER_TTL=60s"
SCHEDULER, HOME = "scheduler", "home"
START_TIMEOUT_S = 180.0  # a worker imports the kit and checks its capabilities first


class LabClusterError(FieldtestError, RuntimeError):
    """A part of the cluster did not start (one line, with the end of its log)."""


@dataclass
class WorkerSpec:
    """A worker: its name, what the test adds to the guide's command, and whether it runs a kit
    other than this one."""

    name: str
    options: list[str] = field(default_factory=list)
    other_kit: bool = False


def _tail(path: Path, lines: int = 5) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return " | ".join(text.strip().splitlines()[-lines:])


class LabCluster:
    """``with LabCluster(folder, [WorkerSpec("a"), ...]) as cluster:`` the scheduler and workers
    running; ``cluster.campaign(file, options)`` starts a submission from the home namespace."""

    def __init__(
        self, folder: Path, workers: list[WorkerSpec], worker_ttl_s: int = 60, hooks: Path | None = None
    ):
        self.folder = folder
        self.specs = {spec.name: spec for spec in workers}
        self.worker_ttl_s = worker_ttl_s
        self.hooks = hooks
        self.steps = guide_steps(CLUSTER_GUIDE)
        self.topo = Topology("ideal", nodes=[SCHEDULER, *self.specs, HOME], wireless=[])
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = f"tcp://{self.topo.address(SCHEDULER)}:8786"
        try:
            self._firewall(SCHEDULER, "scheduler-firewall")
            self.start_scheduler()
            for name in self.specs:
                self._firewall(name, "worker-firewall")
                self.start_worker(name)
        except BaseException:
            self.close()
            raise

    def _guide(self, step: str) -> str:
        script = self.steps[step].strip()
        return adapted(
            script, [(EXAMPLE_SCHEDULER, self.topo.address(SCHEDULER), "the namespace's address")], step
        )

    def _firewall(self, node: str, step: str) -> None:
        done = subprocess.run(
            self.topo.command(node, ["bash", "-c", self.steps[step]]), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise LabClusterError(f"{step} in {node}: {done.stderr.strip()}")

    def start_scheduler(self) -> None:
        """The guide's scheduler command (again, after ``kill_scheduler``)."""
        ttl = (
            EXAMPLE_WORKER_TTL,
            f"WORKER_TTL={self.worker_ttl_s}s",
            "the test's: a cut worker given up soon",
        )
        script = adapted(self._guide("scheduler"), [ttl])
        self._start(SCHEDULER, script, "Scheduler at:")

    def log(self, node: str) -> Path:
        return self.folder / f"{node}.log"

    def _start(self, node: str, script: str, ready: str, env: dict[str, str] | None = None) -> None:
        log = self.log(node)
        with log.open("w") as out:
            self.procs[node] = subprocess.Popen(
                self.topo.command(node, ["bash", "-c", f"exec {script}"]),
                cwd=KIT_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready not in log.read_text(errors="replace"):
            if self.procs[node].poll() is not None or time.monotonic() > deadline:
                raise LabClusterError(f"{node} did not start: {_tail(log)}")
            time.sleep(0.2)

    def scratch(self, name: str) -> Path:
        return self.folder / "scratch" / name

    def start_worker(self, name: str) -> None:
        """The guide's worker command as ``name`` (again, after ``kill_worker``)."""
        spec = self.specs[name]
        script = adapted(self._guide("worker"), [(EXAMPLE_WORKER_NAME, f"--name {name}", "its own name")])
        script += " " + " ".join([*spec.options, "--local-directory", str(self.scratch(name))])
        env = dict(os.environ)
        paths = [self._other_kit()] if spec.other_kit else []
        paths += [self.hooks] if self.hooks is not None else []
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(str(path) for path in paths)
        self._start(name, script, "Registered to:", env)

    def _other_kit(self) -> Path:
        """This kit copied with one file changed: what a worker that pulled another commit runs."""
        root = self.folder / "other-kit"
        if not root.exists():
            shutil.copytree(
                KIT_ROOT / "fieldtest", root / "fieldtest", ignore=shutil.ignore_patterns("__pycache__")
            )
            with (root / "fieldtest" / "__init__.py").open("a") as init:
                init.write("# an edit this worker's machine has and the others have not\n")
        return root

    def kill_worker(self, name: str) -> None:
        """SIGKILL the worker process, as a crash or a power cut would end it."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler, as a crash or a power cut of its machine would end it."""
        self.kill_worker(SCHEDULER)

    def cut_link(self, name: str, cut: bool = True) -> None:
        """Take ``name``'s port on the lab's switch down (a pulled cable: nothing reaches the other
        end, no connection is closed), or up again."""
        port = self.topo.links[name].port
        subprocess.run(
            ["ip", "-n", self.topo.switch_ns, "link", "set", "dev", port, "down" if cut else "up"], check=True
        )

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def unshipped_trials(self, name: str) -> list[Path]:
        """The trials worker ``name`` stopped and kept because it lost its scheduler."""
        from fieldtest.runner.cluster import UNSHIPPED

        return sorted(p for p in (self.scratch(name) / UNSHIPPED).glob("*") if (p / "trial.yaml").is_file())

    def streaming_trials(self, name: str) -> list[Path]:
        """The trial directories on worker ``name`` whose host has started streaming."""
        logs = self.scratch(name).glob("dask-scratch-space/*/fieldtest-trials/*/*/logs/host.log")
        return [log.parents[1] for log in logs if "STREAM start_ns" in log.read_text(errors="replace")]

    def campaign(self, campaign_file: Path, options: list[str]) -> subprocess.Popen:
        """The guide's campaign command from the submitting machine, on ``campaign_file``."""
        script = adapted(self._guide("campaign"), [(EXAMPLE_CAMPAIGN, str(campaign_file), "the test's")])
        return subprocess.Popen(
            self.topo.command(HOME, ["bash", "-c", f"exec {script} {' '.join(options)}"]),
            cwd=KIT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # a shell in a terminal leaves SIGINT to the command: Ctrl-C reaches it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.topo.close()

    def __enter__(self) -> LabCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
