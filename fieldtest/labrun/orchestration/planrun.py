"""Run one side's launch plan the way its launch file does, for machines without ``ros2 launch``.

    python -m fieldtest.labrun.orchestration.planrun [--rehearsal [--without=NAME]] host|robot name:=value ...

``host.launch.py`` and ``robot.launch.py`` map ``fieldtest.labrun.orchestration.launchplan.launch_plan`` one to
one onto launch actions; this does the same with plain processes, so the real rclpy nodes of
host_ws/ and robot_ws/ run where launch / launch_ros cannot be installed (the ROS 2 wheels): the
environment set and unset, the generated config files, the side processes (bridges, routers,
brokers), the robot's pre-flight gate first (the nodes start only if it exits 0), then the nodes
with their parameters in a YAML file (as launch_ros passes them) and their ``--ros-args``.
Stopping is launch's (launch/actions/execute_local.py): after a SIGINT of its own it sends its
processes no SIGINT (a terminal's Ctrl-C, or the runner's SIGINT to the group, reached them), only
SIGTERM after 5 s; after a SIGTERM, or when a node exits (the launch files' OnProcessExit ->
Shutdown), SIGINT first. Nodes first, then the side processes.

Run it with the Python of a ROS 2 environment: the nodes are started with the same interpreter.

``--rehearsal`` (``fieldtest lab rehearse``, both sides on one machine) runs the side processes that
cannot be installed here in their place, with the files the plan wrote: zenoh-bridge-ros2dds as
zenohd + the ros2dds plugin (upstream's supported equivalent, built by
tools/install_zenoh_bridge.sh), the host's Zenoh router as that zenohd, and mqtt_client as the kit's
stand-in ``fieldtest.labrun.rehearsal.mqtt_standin`` (NOT the real mqtt_client; same parameter file, same
wire format). Mosquitto is the real one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import yaml

from fieldtest.errors import FieldtestError
from fieldtest.labrun.orchestration.launchplan import LaunchPlan, NodeSpec, launch_plan
from fieldtest.labrun.rehearsal.standin import parse_argv
from fieldtest.middleware import registry
from fieldtest.middleware.launch import SideProcess
from fieldtest.procs import die_with_parent, signals_set

EXIT_GATE_REFUSED = 1
EXIT_SIDE_PROCESS = 3  # a bridge, router or broker exited at start (refused its config, port taken)
SIDE_START_CHECK_S = 1.0  # a side process that refuses its config exits within this
REHEARSAL_FLAG = "--rehearsal"
WITHOUT_FLAG = "--without="  # rehearsal only: leave a side process out (e.g. the bridge: no link)
STOP_TIMEOUT_S = 5.0  # launch's sigterm_timeout default: SIGINT, then SIGTERM after this


class _QuotedDumper(yaml.SafeDumper):
    """Every string quoted: rcl reads YAML 1.1, where a bare y / n / on / off is a boolean."""


_QuotedDumper.add_representer(
    str, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
)


def parameters_yaml(spec: NodeSpec) -> str:
    """The node's parameters as an rcl parameter file (every node matches ``/**``, as launch_ros writes)."""
    return yaml.dump(
        {"/**": {"ros__parameters": dict(spec.parameters)}}, Dumper=_QuotedDumper, sort_keys=False
    )


def node_argv(spec: NodeSpec, params_file: Path, python: str = sys.executable) -> list[str]:
    """The node's command line: its module run by ``python`` with launch_ros's remappings."""
    return [
        python,
        "-m",
        f"{spec.package}.{spec.executable}",
        "--ros-args",
        "-r",
        f"__node:={spec.name}",
        "-r",
        f"__ns:={spec.namespace or '/'}",
        "--params-file",
        str(params_file),
        *spec.ros_arguments,
    ]


class RehearsalError(FieldtestError, RuntimeError):
    """The rehearsal cannot run on this machine: a missing program or environment, or a side
    process the lab runs that cannot be installed here (one line: what, why, and how to get it)."""


def rehearsal_processes(plan: LaunchPlan, python: str = sys.executable) -> list[SideProcess]:
    """The plan's side processes as a one-machine rehearsal runs them (see the module doc): the
    same names, config files and environment; only the program differs where the lab's cannot be
    installed here."""
    out = []
    for proc in plan.processes:
        if proc.name == "ros2bag":
            raise RehearsalError(f"{proc.name} needs ROS 2 packages that are not among the wheels")
        here = registry.get(plan.cfg.middleware).rehearsal_side_process(
            proc, plan.cfg, plan.config_dir, python
        )
        if isinstance(here, str):
            raise RehearsalError(here)
        out.append(SideProcess(here.name, [str(a) for a in here.argv], here.env, here.config_files))
    return out


class PlanRunner:
    """Starts and stops what one ``LaunchPlan`` describes; ``run()`` returns the side's exit code."""

    def __init__(
        self, plan: LaunchPlan, environ: Mapping[str, str] | None = None, python: str = sys.executable
    ):
        self.plan = plan
        self.python = python
        self.env = plan.environment.apply(dict(os.environ if environ is None else environ))
        self.side: list[subprocess.Popen] = []
        self.nodes: list[subprocess.Popen] = []
        self.stop = threading.Event()
        self.received: list[int] = []  # the stop signals, first first (signals_set)

    def _say(self, line: str) -> None:
        print(f"[planrun {self.plan.cfg.role}] {line}", flush=True)

    def _start_node(self, spec: NodeSpec) -> subprocess.Popen:
        params = self.plan.config_dir / f"{spec.name}.params.yaml"
        params.parent.mkdir(parents=True, exist_ok=True)
        params.write_text(parameters_yaml(spec))
        argv = node_argv(spec, params, self.python)
        self._say("node " + " ".join(argv))
        return subprocess.Popen(
            argv, env={**self.env, **spec.env}, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent
        )

    def _gate(self) -> int:
        gate = self.plan.gate
        if gate is None:
            return 0
        proc = self._start_node(gate)
        self.nodes = [proc]
        while proc.poll() is None:
            if self.stop.wait(0.1):
                self._stop([proc])
        self.nodes = []
        return proc.returncode

    def _start_side_processes(self) -> bool:
        """Bridges, routers, brokers; False if one exits at once (refused its config, port taken)."""
        for proc in self.plan.processes:
            self._say(f"run {proc.name}: {' '.join(proc.argv)}")
            self.side.append(
                subprocess.Popen(
                    proc.argv,
                    env={**self.env, **proc.env},
                    stdin=subprocess.DEVNULL,
                    preexec_fn=die_with_parent,
                )
            )
        if self.side:
            time.sleep(SIDE_START_CHECK_S)
        dead = [
            (p, popen)
            for p, popen in zip(self.plan.processes, self.side, strict=True)
            if popen.poll() is not None
        ]
        for proc, popen in dead:
            self._say(f"{proc.name} exited at start (code {popen.returncode}): the nodes are not started")
        return not dead

    def run(self) -> int:
        for line in self.plan.summary():
            self._say(line)
        self.plan.write_files()
        try:
            if not self._start_side_processes():
                return EXIT_SIDE_PROCESS
            code = self._gate()
            if code != 0:
                self._say(f"pre-flight refused the trial (exit {code}): the nodes are not started")
                return EXIT_GATE_REFUSED if code > 0 else code
            if self.stop.is_set():
                return 130
            self.nodes = [self._start_node(spec) for spec in self.plan.nodes]
            while not self.stop.is_set() and all(p.poll() is None for p in self.nodes):
                time.sleep(0.1)
            return _first_exit(self.nodes)
        finally:
            self._stop(self.nodes)
            self._stop(self.side)

    def _stop(self, procs: list[subprocess.Popen]) -> None:
        stop_processes(procs, sigint=launch_sends_sigint(self.received))


def _first_exit(procs: list[subprocess.Popen]) -> int:
    """The first node's exit code; a node killed by a signal gives 128 + signal, as a shell reports it."""
    done = [c for c in (p.poll() for p in procs) if c is not None]
    if not done:
        return 130
    return 128 - done[0] if done[0] < 0 else done[0]


def launch_sends_sigint(received: list[int]) -> bool:
    """Whether launch stopping after these stop signals sends its processes SIGINT: not when it
    stops on a SIGINT of its own (execute_local.py: send_sigint = not due_to_sigint)."""
    return received[:1] != [signal.SIGINT]


def stop_processes(
    procs: list[subprocess.Popen], timeout_s: float = STOP_TIMEOUT_S, sigint: bool = True
) -> None:
    """SIGINT, then SIGTERM after ``timeout_s``, then SIGKILL: launch's order; without ``sigint``
    (launch stopping on a SIGINT of its own) the wait before SIGTERM, no SIGINT."""
    steps = (
        (signal.SIGINT if sigint else None, timeout_s),
        (signal.SIGTERM, timeout_s),
        (signal.SIGKILL, None),
    )
    for sig, wait_s in steps:
        live = [p for p in procs if p.poll() is None]
        for proc in live:
            if sig is not None:
                proc.send_signal(sig)
        deadline = time.monotonic() + (wait_s or 5.0)
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if all(p.poll() is not None for p in procs):
            return


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rehearsal, without = False, set()
    while argv and argv[0].startswith("--"):  # options before the role
        flag = argv.pop(0)
        if flag == REHEARSAL_FLAG:
            rehearsal = True
        elif flag.startswith(WITHOUT_FLAG) and rehearsal:
            without.add(flag.removeprefix(WITHOUT_FLAG))
        else:
            print(f"fieldtest.labrun.orchestration.planrun: unknown option {flag}", file=sys.stderr)
            return 2
    try:
        role, args = parse_argv(argv)
        plan = launch_plan(args, role)
        if rehearsal:
            plan.processes = rehearsal_processes(plan)
    except FieldtestError as exc:
        print(f"fieldtest.labrun.orchestration.planrun: {exc}", file=sys.stderr)
        return 2
    tag = f"[planrun {plan.cfg.role}] REHEARSAL:"
    if rehearsal and registry.get(plan.cfg.middleware).rehearsal_note:
        print(f"{tag} {registry.get(plan.cfg.middleware).rehearsal_note}", flush=True)
    for proc in [p for p in plan.processes if p.name in without]:
        print(f"{tag} {proc.name} is left out (a link that never comes up)", flush=True)
    plan.processes = [p for p in plan.processes if p.name not in without]
    runner = PlanRunner(plan)
    with signals_set(runner.stop) as received:
        runner.received = received
        return runner.run()


if __name__ == "__main__":
    sys.exit(main())
