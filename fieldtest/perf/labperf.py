"""``fieldtest lab perf``: perf rows between this machine (the main side) and the real robot (the relay).

The lab's own settings say where everything is: the campaign file gives the addresses, ports,
namespace, DDS domain and ROS distro, ``--robot`` the ssh login (as ``fieldtest lab run``). The
relay runs the kit's perf node on the robot, started over ssh as the lab runner starts the robot
launch (``RobotSide``: the robot's setup script, a pid file under the remote root) and stopped by
the runner's own stop script (SIGINT, then SIGTERM) on every way out of a row: its end, a failure,
a stop signal. Should the ssh session drop, the relay sees its parent go and stops itself
(``procs.watch_parent``). Its record is copied back as the runner collects a trial's recording.
Stop signals (Ctrl-C, SIGTERM, SIGHUP) end the run as the lifecycle ends one
(``fieldtest.lifecycle``, as ``fieldtest perf``): from the probe of the robot to the written files,
no further process starts, the rows left are listed, the finished ones written, exit 130.

Security: a secured row runs on the lab trial's own keystore, the campaign's ``keystore`` path: on
this machine as ``fieldtest lab run``'s keystore pre-flight checks it (``check_keystore``), on the
robot at the same path from its login's home (where the lab guide's keys step copies it), and the
MQTT port for the setting as a lab trial takes it (``with_lab_defaults``). A setting the robot's
side cannot run is refused before anything starts: DDS Security where the robot Python's CycloneDDS
binding has no security plugins, any setting without the keystore on either machine.

The two machines' clocks are not shared: rows measure round trips (performance_test's relay mode),
throughput, loss and each side's CPU and memory, and one-way figures on the host's clock once the
host - robot offset is estimated as a lab trial estimates it (``fieldtest.clocksync``: four stamps
per probe, the minimum-delay probe's offset, its error at most half that probe's round trip), on
the channel the middleware's lab trials use (``Middleware.lab_clock_source``): over the link, where
each ping and its echo are such a probe, or over UDP (``fieldtest.labrun.nodelogic.udpclock``), the
relay probing the host for the whole row. Without an estimate the row keeps round trips only and
says why. Rows the lab cannot run are refused with a one-line reason: another mode than roundtrip,
more than one subscriber, or a middleware whose library the robot's Python lacks (Fast DDS: whose
helper, ``fastddsstamp.cpp``, it cannot build against a libfastrtps with its headers and load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from fieldtest.clocksync import ProbeSample, best_offset
from fieldtest.endpoints.clock import MonotonicClock
from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.launchsettings import with_lab_defaults
from fieldtest.labrun.nodelogic.udpclock import UdpClockResponder
from fieldtest.labrun.orchestration.preflight import check_keystore
from fieldtest.labrun.orchestration.remote import (
    PID_FILE,
    STOP_WAIT_S,
    RemoteError,
    RemoteShell,
    RobotSide,
    robot_setup_script,
    shell_word,
)
from fieldtest.lifecycle import Interrupted, not_run, raise_if_stopped, run_exit_code, start_in_order
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.middleware.launch import CLOCK_UDP_PORT
from fieldtest.procs import ManagedProcess, ProcessGroup, ProcessStartError, interruption, run_stop_event
from fieldtest.realtime import REALTIME_ENV, REALTIME_PRIORITY
from fieldtest.record import TrialRequest

from .node import LATE_GRACE_S, READY
from .results import table2_markdown, write_all
from .run import (
    ROW_MARGIN_S,
    START_TIMEOUT_S,
    CombinationRefused,
    PerfCase,
    PerfInputError,
    PerfRow,
    _one_line,
    _Sampler,
    _wait_main,
    check_case,
    family_defaults,
    family_settings,
    interrupted_row,
)
from .stats import reduce_row

LAB_NETWORK = "lab"
DEFAULT_REMOTE_ROOT = "~/fieldtest/perf"
CLOCKS_NOTE = (
    "the host's and the robot's clocks are not shared: round trips on the host's clock; one-way "
    "figures on it through the estimated host - robot offset (each row's clock_offset_s, error at "
    "most ntp_error_bound_ms), or not given where no offset could be estimated"
)
# What the twin transports import on the relay's side (each middleware's transport_library).
TRANSPORT_LIBRARIES = sorted({m.transport_library for m in registry.REGISTRY.values() if m.transport_library})
# The compiled helpers some build on first use (each middleware's transport_helper): built and loaded
# on the robot by the probe for the run's middlewares, which answers what kept each from loading
# ("" where it loaded)
HELPER_PROBLEMS = "transport_helpers"
# The security plugins some load (each middleware's security_plugin_check): the probe's answer,
# per check module, names the plugin libraries the robot's binding lacks
SECURITY_PLUGIN_CHECKS = sorted(
    {m.security_plugin_check for m in registry.REGISTRY.values() if m.security_plugin_check}
)
SECURITY_PLUGINS = "missing_security_plugins"
RELAY = "relay1"
RELAY_SSH = "ssh-relay1"  # the local ssh client that carries the relay's output (its READY line)
SCHEDULING = "relay scheduling:"
# Run from the login's home, where ``python -c`` puts "" first on sys.path: the relay's own
# ~/fieldtest/perf folder would then shadow fieldtest.perf of an editable install (a namespace portion).
_PROBE_TEMPLATE = (
    "import sys\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.')]\n"
    "import importlib.util as u, json, fieldtest.perf.node\n"
    "def has(m):\n"
    "    try:\n"
    "        return u.find_spec(m) is not None\n"
    "    except ModuleNotFoundError:\n"
    "        return False\n"
    f"found = {{m: has(m) for m in {TRANSPORT_LIBRARIES!r}}}\n"
    "def loads(m):\n"
    "    try:\n"
    "        __import__(m, fromlist=['library']).library()\n"
    "        return ''\n"
    "    except Exception as e:\n"
    "        return (str(e).splitlines() or [type(e).__name__])[0]\n"
    f"found[{HELPER_PROBLEMS!r}] = {{m: loads(m) for m in HELPERS}}\n"
    f"found[{SECURITY_PLUGINS!r}] = {{\n"
    f"    m: __import__(m, fromlist=[{SECURITY_PLUGINS!r}]).{SECURITY_PLUGINS}() for m in {SECURITY_PLUGIN_CHECKS!r}\n"
    "}\n"
    "print(json.dumps(found))"
)


class LabPerfError(FieldtestError, RuntimeError):
    """The robot cannot run any row (not reached, no kit): one line."""


@dataclass
class LabLink:
    """The host and the robot as the lab's settings name them; the relay's start, stop and collection."""

    base: TransportConfig  # the campaign's transport: addresses, ports, namespace, DDS domain
    robot: RobotSide
    python: str = "python3"  # the robot's Python with the kit (``fieldtest lab bundle`` installs it)
    robot_modules: dict[str, bool] = field(default_factory=dict)
    # security_plugin_check -> the security plugins the robot's binding lacks
    missing_plugins: dict[str, list[str]] = field(default_factory=dict)
    helper_problems: dict[str, str] = field(default_factory=dict)  # transport_helper -> why it did not load
    robot_keystores: dict[str, str] = field(default_factory=dict)  # campaign path -> the robot's, "" if none

    def probe(self, middlewares: Iterable[str] = ()) -> None:
        """Which middleware libraries the robot's Python has (and that it has the kit's perf node);
        the compiled helpers of ``middlewares`` built and loaded there."""
        helpers = sorted({h for m in middlewares if (h := registry.get(m).transport_helper)})
        probe = f"HELPERS = {helpers!r}\n{_PROBE_TEMPLATE}"
        script = f"{self._setup()}exec {shell_word(self.python)} -c {shlex.quote(probe)}"
        try:
            done = self.robot.shell.run(script, timeout_s=180.0)  # a first Fast DDS helper build included
            found = json.loads(done.stdout.strip().splitlines()[-1])
            self.missing_plugins = {
                check: list(missing) for check, missing in found.pop(SECURITY_PLUGINS).items()
            }
            self.helper_problems = dict(found.pop(HELPER_PROBLEMS))
            self.robot_modules = found
        except (RemoteError, ValueError, IndexError) as exc:
            raise LabPerfError(
                f"the robot ({self.robot.shell.where()}) cannot run the kit's perf node with {self.python}: "
                f"{_one_line(str(exc))} (install the kit from `fieldtest lab bundle`, or name --robot-python)"
            ) from None

    def refusal(self, case: PerfCase) -> str:
        """Why ``case`` cannot run in the lab, or ""."""
        if case.mode != "roundtrip":
            return f"mode {case.mode}: the host's and the robot's clocks are not shared; the lab measures round trips"
        if case.subscribers != 1:
            return f"subscribers {case.subscribers}: the lab has one robot"
        if case.vpn != "none":
            return f"vpn {case.vpn}: the lab's VPN is the lab's own; the kit sets one up on the twin only"
        family = registry.get(case.middleware)
        if family.bridged(case.transport()):
            return (
                f"{family_settings(case.set_apart())}: lab perf rows run the kit's transports on both "
                f"machines (use {family_defaults(case)})"
            )
        if family.transport_helper:
            problem = self.helper_problems.get(family.transport_helper, "not probed")
            if problem:
                return (
                    f"middleware {case.middleware}: the robot's {self.python} cannot build or load the kit's "
                    f"{case.middleware} helper ({family.transport_helper}): {problem}"
                )
        elif not self.robot_modules.get(module := family.transport_library or "", False):
            return (
                f"middleware {case.middleware}: the robot's {self.python} has no {module} "
                f"(its side of the row runs the kit's {module} transport)"
            )
        return self.security_refusal(case)

    def security_refusal(self, case: PerfCase) -> str:
        """Why ``case``'s security setting cannot run between the two machines, or "": the robot's
        binding must load the security plugins, and the lab trial's keystore must pass its
        pre-flight check here and be at its path on the robot."""
        if case.security == "none":
            return ""
        family = registry.get(case.middleware)
        family.security_setting(case.security)  # one the middleware takes
        # only a middleware that declares a check loads plugins into its Python binding (a compiled
        # helper loads the ones its own library has)
        missing = self.missing_plugins.get(family.security_plugin_check or "", [])
        if missing:
            library = family.transport_library
            return (
                f"security {case.security}: the robot's {self.python} {library} binding cannot load the "
                f"security plugins ({', '.join(f'lib{n}.so' for n in missing)}): build it against the "
                f"robot's {library} C library with them, as tools/install.sh does here"
            )
        config = self.config(case)
        check = check_keystore(TrialRequest(name="perf", transport=config), trial_length_s=case.duration_s)
        if not check.ok:
            return f"security {case.security}: {check.detail}"
        if not self.robot_keystore(self.base.keystore):
            return (
                f"security {case.security}: no keystore at {self.base.keystore} on the robot "
                f"({self.robot.shell.where()}); copy it there as the lab guide's keys step does"
            )
        return ""

    def robot_keystore(self, path: str) -> str:
        """The campaign's keystore ``path`` on the robot, resolved from its login's home as the
        robot's launch gets it (``shell_word``), "" if it is not there."""
        if path not in self.robot_keystores:
            done = self.robot.shell.run(f"cd {shell_word(path)} && pwd", timeout_s=30.0, check=False)
            self.robot_keystores[path] = done.stdout.strip() if done.returncode == 0 else ""
        return self.robot_keystores[path]

    def config(self, case: PerfCase) -> TransportConfig:
        """The campaign's transport for ``case``, as a lab trial of it: the MQTT port for its
        security (``with_lab_defaults``), the keystore path as this machine reads it."""
        config = self.base.model_copy(
            update={"middleware": case.middleware, "qos": case.qos, "security": case.security}
        )
        config = with_lab_defaults(TrialRequest(name="perf", transport=config)).transport
        if config.keystore:
            config = config.model_copy(
                update={"keystore": str(Path(config.keystore).expanduser().absolute())}
            )
        return config

    def host_starts(self, config: TransportConfig) -> str | None:
        """What the lab's host side starts for this middleware ("router", "broker" or None),
        decided as for a lab trial (``lab_host_starts``)."""
        same = config.router_address == config.host_address
        return registry.get(config.middleware).lab_host_starts(same)

    def _setup(self) -> str:
        return f"{self.robot.setup} && " if self.robot.setup else ""

    def _dir(self, run_id: str) -> str:
        return shell_word(self.robot.trial_dir(run_id))

    def send_spec(self, run_id: str, spec: dict) -> None:
        text = shlex.quote(json.dumps(spec))
        self.robot.shell.run(
            f"mkdir -p {self._dir(run_id)} && printf '%s' {text} > {self._dir(run_id)}/spec.json"
        )

    def relay_argv(self, run_id: str, limit_s: float, keystore: str = "") -> list[str]:
        """The relay over ssh: its pid recorded first (the runner's stop script reads it), then
        exec'd in its row folder, so the pid is the relay's; at SCHED_FIFO where the robot's login
        may (as the lab's robot nodes, ``FIELDTEST_REALTIME=0`` turns it off), its log says which.
        A guard on the robot stops it after ``limit_s`` whatever becomes of the laptop and the
        link (a dead link leaves sshd's session, and so the relay's parent, alive for hours).
        ``keystore``: the robot's own copy (``robot_keystore``), for a secured row."""
        node = f"{shell_word(self.python)} -m fieldtest.perf.node spec.json --role relay --index 1 --out {RELAY}.json"
        if keystore:
            node += f" --keystore {shlex.quote(keystore)}"
        d = self._dir(run_id)
        chrt = f"chrt -f {REALTIME_PRIORITY}"
        realtime = (
            f'rt=""; [ "${{{REALTIME_ENV}:-1}}" != 0 ] && {chrt} true 2>/dev/null && rt="{chrt}"; '
            f'echo "{SCHEDULING} ${{rt:-normal}}"'
        )
        script = (
            f"{self._setup()}mkdir -p {d} && cd {d} && echo $$ > {PID_FILE} && {{ {realtime}; }} || exit 1; "
            f"{relay_guard(limit_s)} & exec $rt {node}"
        )
        return self.robot.shell.argv(script)

    def describe(self, config: TransportConfig, clocks: str = CLOCKS_NOTE) -> dict:
        starts = self.host_starts(config)
        infra = registry.get(config.middleware).infra_process
        if starts:
            where = f"{starts} started on this host ({config.host_address})"
        elif infra:
            address = config.router_address if infra == "router" else config.broker_address
            where = f"{infra} at {address}, run there as the lab runs it (not started here)"
        else:
            where = ""
        return {
            "profile": LAB_NETWORK, "host_address": config.host_address, "robot_address": config.robot_address,
            "robot": self.robot.shell.where(), "robot_python": self.python, "infrastructure": where,
            "security": config.security, "keystore": config.keystore,
            "robot_keystore": self.robot_keystores.get(self.base.keystore, "") if config.security != "none" else "",
            "clocks": clocks,
        }  # fmt: skip


# The relay is running: its pid exists and is no zombie. A relay that has exited stays a zombie
# until its parent reaps it, and the runner's stop script waits for the guard (in the relay's
# process group) to end: a guard that took the zombie for a relay held each stop for its whole wait.
RELAY_RUNNING = 'ps -o stat= -p $$ 2>/dev/null | grep -qv "^Z"'


def relay_guard(limit_s: float) -> str:
    """Shell, to run in the background: a watcher of this shell's pid (the relay once exec'd)
    that sends it SIGINT after ``limit_s`` (SIGKILL if it lingers, as the runner's stop script)
    and ends with it; it polls, so a recycled pid is never signalled long after the relay is gone."""
    polls = max(1, round(STOP_WAIT_S / 0.1))
    return (
        f"( end=$((SECONDS + {math.ceil(limit_s)})); while {RELAY_RUNNING}; do "
        f"if [ $SECONDS -ge $end ]; then kill -INT $$; "
        f"for i in $(seq {polls}); do {RELAY_RUNNING} || exit 0; sleep 0.1; done; kill -KILL $$; exit 0; fi; "
        "sleep 1; done ) </dev/null >/dev/null 2>&1"
    )


def relay_limit_s(case: PerfCase, discovery_s: float, drain_s: float) -> float:
    """The longest a relay may run: its start, discovery, the row, the drain, the grace for late
    messages and the row's cut-off."""
    return START_TIMEOUT_S + discovery_s + case.duration_s + drain_s + LATE_GRACE_S + ROW_MARGIN_S


def run_lab_row(
    case: PerfCase,
    row_dir: Path,
    lab: LabLink,
    *,
    discovery_s: float = 20.0,
    drain_s: float = 3.0,
    stop: threading.Event | None = None,
) -> PerfRow:
    """``case`` between this machine and the robot: a PerfRow, refused, failed or (``stop`` cut it
    short) interrupted with its reason rather than raising."""
    if stop is not None and stop.is_set():
        return interrupted_row(case, stop)  # the refusal may ask the robot: nothing starts now
    try:
        message = check_case(replace(case, network="loopback"))  # names, numbers and sizes as any row
        refused = lab.refusal(case)
        if refused:
            raise CombinationRefused(refused)
    except PerfInputError as exc:
        return PerfRow(case, status="refused", error=str(exc))
    row_dir.mkdir(parents=True, exist_ok=True)
    run_id = f"{row_dir.resolve().parent.parent.name}-{row_dir.name}"
    config = lab.config(case)
    spec = {
        "transport": config.model_dump(), "message": case.message, "rate_hz": case.rate_hz,
        "duration_s": case.duration_s, "mode": case.mode, "relays": 1, "discovery_s": discovery_s,
        "drain_s": drain_s, "relay_addresses": {},
    }  # fmt: skip
    source = registry.get(case.middleware).lab_clock_source
    try:
        with (
            _host_infrastructure(lab, config, row_dir) as infra,
            _clock_channel(source, config, spec) as channel_problems,
        ):
            (row_dir / "spec.json").write_text(json.dumps(spec, indent=1))
            records, processes = _run_lab_processes(
                case, row_dir, lab, run_id, spec, infra, stop, discovery_s + drain_s + LATE_GRACE_S
            )
        clock = estimate_offset(source, records, channel_problems)
        offset_s = clock.offset_s
        row = reduce_row(case, message, on_host_clock(records, offset_s) if offset_s is not None else records)
    except Interrupted:
        return interrupted_row(case, stop)
    except (FieldtestError, OSError) as exc:
        return PerfRow(case, status="failed", error=_one_line(str(exc)), link=lab.describe(config))
    if not clock.ok:
        _drop_one_way(row)
    row.figures.update(clock.figures())
    row.processes = processes
    row.link = lab.describe(config, clock.describe())
    return row


@dataclass
class ClockEstimate:
    """The host - robot clock offset of one row (``offset_s``; analysis's sign: host minus robot)
    from its minimum-delay probe, or why there is none (``why``)."""

    source: str  # the channel its probes took: "link" or "udp" (Middleware.lab_clock_source)
    offset_s: float | None = None
    min_delay_s: float | None = None
    probes: int = 0
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.offset_s is not None

    def figures(self) -> dict:
        bound = None if self.min_delay_s is None else self.min_delay_s / 2 * 1e3
        return {"clock_offset_source": self.source, "clock_offset_s": self.offset_s,
                "min_delay_s": self.min_delay_s, "ntp_error_bound_ms": bound, "clock_probes": self.probes}  # fmt: skip

    def describe(self) -> str:
        if self.offset_s is None or self.min_delay_s is None:
            return f"one-way latency not measured: {self.why}; latencies are round trips (host clock)"
        channel = "over the link (each ping and its echo)" if self.source == "link" else "over UDP"
        return (
            f"one-way figures on the host's clock: host - robot offset {self.offset_s * 1e3:+.3f} ms from the "
            f"minimum-delay probe of {self.probes} {channel}, error at most {self.min_delay_s * 500:.3f} ms"
        )


@contextlib.contextmanager
def _clock_channel(source: str, config: TransportConfig, spec: dict) -> Iterator[list[str]]:
    """The host's end of the UDP clock channel for the row (``source`` "udp"), its address in the
    relay's ``spec``; yields a list that holds why the channel could not open, if it could not."""
    problems: list[str] = []
    if source != "udp":
        yield problems
        return
    try:
        responder = UdpClockResponder(MonotonicClock().now_ns, CLOCK_UDP_PORT).start()
    except OSError as exc:
        problems.append(f"the UDP clock channel's port {CLOCK_UDP_PORT} on this host: {exc.strerror or exc}")
        yield problems
        return
    spec["clock"] = {"host": config.host_address, "port": CLOCK_UDP_PORT}
    try:
        yield problems
    finally:
        responder.close()


def estimate_offset(source: str, records: dict, problems: list[str]) -> ClockEstimate:
    """The row's host - robot offset from its probes: the relay's UDP probes of the host, or each
    measured ping with its echo (t1 host send, t2 relay arrival, t3 echo send, t4 echo arrival)."""
    if problems:
        return ClockEstimate(source, why=problems[0])
    if source == "udp":  # the relay probed: responder (host) minus initiator (robot)
        samples = [ProbeSample(i, *stamps) for i, stamps in enumerate(records[RELAY].get("clock_probes", []))]
        sign = 1.0
    else:  # the host's pings: responder (robot) minus initiator (host)
        samples = _ping_probes(records)
        sign = -1.0
    best = best_offset([s for s in samples if s.delay_s >= 0])
    if best is None:
        return ClockEstimate(
            source, why=f"no clock probe completed {'over UDP' if source == 'udp' else 'over the link'}"
        )
    return ClockEstimate(source, sign * best.offset_s, best.delay_s, len(samples))


def _ping_probes(records: dict) -> list[ProbeSample]:
    sends = dict(enumerate(records["main"]["sends"]))
    arrivals: dict[int, int] = {}
    for seq, _sent, arrival_ns, *_ in records[RELAY]["arrivals"]:
        arrivals.setdefault(seq, arrival_ns)
    samples: dict[int, ProbeSample] = {}
    for seq, echo_sent_ns, echo_arrival_ns in records["main"]["echoes"].get("1", []):
        if seq in sends and seq in arrivals and seq not in samples:
            samples[seq] = ProbeSample(seq, sends[seq], arrivals[seq], echo_sent_ns, echo_arrival_ns)
    return list(samples.values())


def on_host_clock(records: dict, offset_s: float) -> dict:
    """The records with every robot stamp put on the host's clock (robot + host - robot offset): the
    relay's arrival, decode and echo stamps and the echoes' send stamps."""
    shift = round(offset_s * 1e9)
    relay = dict(records[RELAY])
    relay["arrivals"] = [[seq, sent, *(t + shift for t in robot)] for seq, sent, *robot in relay["arrivals"]]
    main = dict(records["main"])
    main["echoes"] = {
        k: [[seq, sent + shift, arrival] for seq, sent, arrival in v] for k, v in main["echoes"].items()
    }
    return {**records, "main": main, RELAY: relay}


@contextlib.contextmanager
def _host_infrastructure(
    lab: LabLink, config: TransportConfig, row_dir: Path
) -> Iterator[ManagedProcess | None]:
    """The router or broker, where the lab's host side would start it; elsewhere it runs already."""
    infra = registry.infrastructure(config, row_dir, realtime=True) if lab.host_starts(config) else None
    if infra is None:
        yield None
        return
    with infra:
        yield infra


def _run_lab_processes(
    case: PerfCase,
    row_dir: Path,
    lab: LabLink,
    run_id: str,
    spec: dict,
    infra: ManagedProcess | None,
    stop: threading.Event | None,
    tail_s: float,
) -> tuple[dict, dict]:
    """The relay on the robot (READY), the main side here, none after a stop signal
    (``lifecycle.start_in_order``); wait; stop both, the relay by the runner's stop script whatever
    happened; its record copied back (``Interrupted`` then, after a stop signal)."""
    procs = ProcessGroup(row_dir / "logs")
    sampler = _Sampler(procs, infra)
    keystore = lab.robot_keystore(lab.base.keystore) if case.security != "none" else ""

    def relay() -> None:
        lab.send_spec(run_id, spec)
        limit_s = relay_limit_s(case, spec["discovery_s"], spec["drain_s"])
        procs.start(RELAY_SSH, lab.relay_argv(run_id, limit_s, keystore))
        procs.wait_ready(RELAY_SSH, marker=READY, timeout_s=START_TIMEOUT_S)

    def main() -> None:
        args = [str(row_dir / "spec.json"), "--role", "main", "--out", str(row_dir / "main.json")]
        procs.start("main", [sys.executable, "-m", "fieldtest.perf.node", *args], realtime=True)

    try:
        start_in_order((relay, main), stop)
        _wait_main(procs, case, stop, sampler, tail_s)
    except Interrupted:
        pass  # all stopped below, and what the relay wrote collected, as at a row's end
    finally:
        sampler.sample()
        if "main" in procs.procs:
            procs.stop("main")
        stopped = _stop_relay(lab, run_id)
        if RELAY_SSH in procs.procs:
            procs.stop(RELAY_SSH)
    robot_dir = row_dir / "robot"
    if RELAY_SSH in procs.procs:  # else a stop signal came before it: nothing ran on the robot
        try:
            lab.robot.collect(run_id, robot_dir)
        except RemoteError as exc:
            raise ProcessStartError(f"the relay's record was not collected: {exc}{stopped}") from None
    raise_if_stopped(stop)  # cut short: the records are partial (kept in the row's folder)
    records = {"main": _record(row_dir / "main.json", procs.tail("main")),
               RELAY: _record(robot_dir / f"{RELAY}.json", procs.tail(RELAY_SSH))}  # fmt: skip
    summary = sampler.summary()
    summary.setdefault("main", {})["realtime"] = procs.realtime().get("main")
    summary[RELAY] = _robot_usage(records[RELAY])
    summary[RELAY]["realtime"] = f"{SCHEDULING} chrt" in (row_dir / "logs" / f"{RELAY_SSH}.log").read_text()
    return records, summary


def _stop_relay(lab: LabLink, run_id: str) -> str:
    """The runner's stop script on the robot; '' or why it may not have run."""
    try:
        lab.robot.stop(run_id)
    except RemoteError as exc:
        return f" (robot stop: {exc}; the relay stops itself when its ssh session ends)"
    return ""


def _record(path: Path, tail: str) -> dict:
    if not path.exists():
        raise ProcessStartError(f"{path.name} missing: {tail}")
    return json.loads(path.read_text())


def _robot_usage(record: dict) -> dict:
    """The relay's CPU and peak RSS over its whole run, from its own getrusage on the robot."""
    usage = record["usage"]
    return {"machine": "robot", "cpu_s": round(usage["ru_utime"] + usage["ru_stime"], 3),
            "rss_max_kb": usage["ru_maxrss"], "source": "getrusage on the robot"}  # fmt: skip


def _drop_one_way(row: PerfRow) -> None:
    """One-way figures subtract a robot stamp from a host stamp: without an offset between the two
    clocks they mean nothing, so they are left empty (counts and the relay's own turn-around stay)."""
    for figures in (row.figures, *row.subscribers):
        for key in figures:
            if key.startswith("one_way_"):
                figures[key] = None


# ------------------------------------------------------------------------------------- command line
def _lab_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fieldtest lab perf",
        description="Perf rows between this machine (main side) and the robot (relay, over ssh), "
        "addresses and ports from the campaign file; every other option is fieldtest perf's.",
        epilog="e.g. fieldtest lab perf trials/seed-study.yaml --robot ubuntu@192.168.1.20 --message Array1k",
    )
    p.add_argument("campaign", help="the lab's campaign file (its addresses, ports, namespace, ROS distro)")
    p.add_argument(
        "--robot", help="ssh destination of the robot's Pi (user@host); omit: the relay runs locally"
    )
    p.add_argument("--remote-root", default=DEFAULT_REMOTE_ROOT, help="where the relay writes on the robot")
    p.add_argument(
        "--robot-setup", default="", help="shell setup on the robot (default: its ROS 2 and robot_ws)"
    )
    p.add_argument(
        "--robot-python", default="python3", help="the robot's Python with the kit (default python3)"
    )
    return p


def lab_link(args: argparse.Namespace) -> tuple[LabLink, list[str]]:
    """The lab link from the campaign and the login; the campaign's middlewares."""
    from fieldtest.trialcampaign import load_trials

    campaign, trials = load_trials(args.campaign)
    if not trials:
        raise PerfInputError(f"{args.campaign}: no trial, so no addresses")
    setup = args.robot_setup or robot_setup_script(campaign.lab.ros_distro)
    robot = RobotSide(shell=RemoteShell(args.robot), setup=setup, remote_root=args.remote_root)
    middlewares = list(dict.fromkeys(t.transport.middleware for t in trials))
    return LabLink(trials[0].transport, robot, args.robot_python), middlewares


def lab_perf_main(argv: list[str]) -> int:
    from .cli import _parser, build_cases

    lab_args, rest = _lab_parser().parse_known_args(argv)
    args = _parser().parse_args(rest)
    if args.network != ["loopback"] or args.profiles:
        raise PerfInputError("--network/--profiles: the lab's rows run on the lab's own link")
    lab, middlewares = lab_link(lab_args)
    if not any(a.startswith("--middleware") for a in rest):
        args.middleware = middlewares
    cases = [replace(c, network=LAB_NETWORK) for c in build_cases(args)]
    out = args.out or Path("trials/perf") / f"lab-{time.strftime('%Y%m%d-%H%M%S')}"
    with run_stop_event() as stop:  # the probe, the rows and the write of the files
        probe_unless_stopped(lab, [c.middleware for c in cases], stop)
        rows = run_lab_rows(cases, out, lab, args.discovery_timeout, stop)
        meta = {"argv": ["lab", "perf", *argv], "interrupted": stop.is_set(), "rows_planned": len(cases),
                "lab": {"robot": lab.robot.shell.where(), "clocks": CLOCKS_NOTE}}  # fmt: skip
        paths = write_all(rows, out, meta)
    print(table2_markdown(rows))
    for row in rows:
        if row.status != "ok":
            print(f"{row.status}: {row.case.label}: {row.error}")
        elif row.link.get("clocks"):
            print(f"clocks: {row.case.label}: {row.link['clocks']}")
    print(f"{len(rows)} of {len(cases)} rows: " + ", ".join(str(p) for p in paths))
    if stop.is_set():
        print(
            f"fieldtest lab perf: {interruption(stop)}; the relay was stopped on the robot", file=sys.stderr
        )
    return run_exit_code(bool(rows) and all(r.status == "ok" for r in rows), stop)


def probe_unless_stopped(lab: LabLink, middlewares: list[str], stop: threading.Event) -> None:
    """``lab.probe``; a probe that fails once a stop signal has come is no error (no row will start):
    Ctrl-C at a terminal reaches its ssh client too."""
    try:
        lab.probe(middlewares)
    except LabPerfError:
        if not stop.is_set():
            raise


def run_lab_rows(
    cases: list[PerfCase], out: Path, lab: LabLink, discovery_s: float, stop: threading.Event
) -> list[PerfRow]:
    """The rows in order, in ``out/rows/NNN``; after a stop signal no further row starts (those
    left are listed, ``lifecycle.not_run``) and the row it cut short is not kept."""
    rows: list[PerfRow] = []
    started = 0
    for i, case in enumerate(cases):
        if stop.is_set():
            break
        started += 1
        print(f"{i + 1}/{len(cases)} {case.label}", file=sys.stderr)
        row = run_lab_row(case, out / "rows" / f"{i:03d}", lab, discovery_s=discovery_s, stop=stop)
        if not stop.is_set():
            rows.append(row)
    not_run(cases, started, stop, lambda line: print(line, file=sys.stderr), name=lambda c: c.label)
    return rows
