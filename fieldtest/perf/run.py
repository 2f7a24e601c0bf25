"""Run one perf row: its link, keystore, router or broker, the relays and the main side, each in
its own process (in its own network namespace on an emulated link), and reduce their records.

A row never hangs: every process start has a timeout, the main side gives up on a relay that does
not answer within ``discovery_s`` (the row is then recorded as failed), and the whole row is cut
off ``ROW_MARGIN_S`` after its planned end. Bad input is refused before anything starts, with one
line naming the field (``PerfInputError``). A stop signal (the run's stop event) ends the row as the
lifecycle ends a trial (``fieldtest.lifecycle``): no further process starts, every started one is
stopped, and the row comes back ``interrupted``.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.errors import FieldtestError
from fieldtest.lifecycle import Interrupted, raise_if_stopped, start_in_order
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.procs import ProcessGroup, ProcessStartError, free_port, interruption, lease_dds_domain

from .case import FAMILY_PERF_FIELDS, SATURATION, PerfCase, PerfRow, judge_row
from .messages import MessageError, PerfMessage, parse_message
from .node import EXIT_NO_RELAY, LATE_GRACE_S, READY
from .stats import reduce_row

if TYPE_CHECKING:
    from fieldtest.middleware.declaration import Middleware
    from fieldtest.netem.profiles import LinkProfile
    from fieldtest.netem.topology import LoopbackTopology, Topology
    from fieldtest.procs import ManagedProcess

ROW_MARGIN_S = 30.0
START_TIMEOUT_S = 30.0
MODES = ("roundtrip", "one-way")
NO_LINK = "never answered"  # in a row's error where no relay answered a warm-up ping: no link
SATURATION_WORD = "max"  # how the command line and a campaign file ask for it
# The bridges route the ping topic (cmd_stamp) only beside Twist commands, as on Humble
# (fieldtest.middleware.labshared.link_topics): a bridged row's sides are set up as a Humble trial's.
BRIDGED_CMD_TYPE = "twist"


class PerfInputError(FieldtestError, ValueError):
    """A row that cannot run as asked: one line naming the field and the problem; ``field``: the
    PerfCase field at fault, where one is."""

    def __init__(self, message: str, field: str = ""):
        super().__init__(message)
        self.field = field


class CombinationRefused(PerfInputError):
    """Valid names whose combination cannot run (a size, a rate, a topology): a refused row."""


def parse_rate(text: str | float) -> float:
    """A rate in Hz, or "max" (saturation: SATURATION); one line naming the problem otherwise."""
    if isinstance(text, str) and text.strip().lower() == SATURATION_WORD:
        return SATURATION
    try:
        rate = float(text)
    except (TypeError, ValueError):
        raise PerfInputError(f"rate: {text!r}, use a number of Hz or {SATURATION_WORD}", "rate_hz") from None
    if not (rate > 0 and math.isfinite(rate)):
        raise PerfInputError(
            f"rate: {rate!r} Hz, must be a positive number (or {SATURATION_WORD}: as fast as the "
            "middleware accepts)", "rate_hz",
        )  # fmt: skip
    return rate


def link_profile(case: PerfCase, profiles: dict | None = None) -> LinkProfile:
    """The LinkProfile of ``case.network``: the user's (``profiles``, name -> LinkProfile) or built in."""
    from fieldtest.netem import get_profile

    return (profiles or {}).get(case.network) or get_profile(case.network)


def check_case(case: PerfCase, profiles: dict | None = None) -> PerfMessage:
    """Refuse what cannot run, before anything starts (PerfInputError, one line; its ``field`` is
    the PerfCase field at fault)."""
    try:
        message = parse_message(case.message)
    except MessageError as exc:
        raise PerfInputError(str(exc), "message") from None
    try:
        middleware = registry.get(case.middleware)
    except ValueError as exc:
        raise PerfInputError(str(exc), "middleware") from None
    if not middleware.twin:
        raise PerfInputError(
            f"middleware {case.middleware!r}: lab only, the twin has no transport for it", "middleware"
        )
    _check_numbers(case)
    _check_family_values(case)
    limit = middleware.max_payload
    if limit is not None and message.size > limit:
        raise CombinationRefused(
            f"message {case.message!r}: {message.size} bytes, more than {case.middleware} carries ({limit})"
        )
    if middleware.max_receivers is not None and case.subscribers > middleware.max_receivers:
        raise CombinationRefused(
            f"subscribers: {case.middleware} links one host to {middleware.max_receivers} receiver(s); "
            "use a middleware with a router or broker for more"
        )
    if case.subscribers > 1 and middleware.bridged(case.transport()):
        raise CombinationRefused(
            f"subscribers: the bridged path carries one robot's DDS; use {family_defaults(case)} for several"
        )
    _check_settings(case, profiles)
    _check_vpn(case, middleware)
    _check_link_rate(case, message, profiles)
    return message


def _check_family_values(case: PerfCase) -> None:
    """Each family field the middleware reads holds one of its settings' values."""
    read = case.normalized().family_values()
    for name, value in case.family_values().items():
        choices = FAMILY_PERF_FIELDS[name].choices
        if read[name] and value not in choices:
            raise PerfInputError(f"{name} {value!r}: use {' or '.join(choices)}", name)


def family_settings(values: dict[str, str]) -> str:
    """Family row fields as text: ``<field> <value>`` each."""
    return ", ".join(f"{name} {value}" for name, value in values.items())


def family_defaults(case: PerfCase) -> str:
    """The defaults of the family fields that set ``case`` apart, as text."""
    return family_settings({name: FAMILY_PERF_FIELDS[name].default for name in case.set_apart()})


def _check_vpn(case: PerfCase, middleware: Middleware) -> None:
    """A VPN row needs an emulated network and two nodes: the tunnel joins host and robot."""
    from fieldtest.netem.vpn import VpnError, check_setting

    try:
        check_setting(case.vpn)
    except VpnError as exc:
        raise PerfInputError(str(exc), "vpn") from None
    if case.vpn == "none":
        return
    if case.network == "loopback":
        raise PerfInputError(
            f"vpn {case.vpn}: needs an emulated network (the tunnel joins two namespaces)", "vpn"
        )
    if middleware.emulated_nodes() or case.subscribers > 1 or middleware.bridged(case.transport()):
        raise CombinationRefused(
            f"vpn {case.vpn}: the tunnel joins host and robot only; {case.middleware} here needs more "
            "machines (a router, broker, bridge or several subscribers)"
        )


def _check_numbers(case: PerfCase) -> None:
    if not (case.rate_hz >= 0 and math.isfinite(case.rate_hz)):
        raise PerfInputError(f"rate: {case.rate_hz!r} Hz, must be a positive number", "rate_hz")
    if case.saturated and case.mode == "roundtrip":
        raise PerfInputError(
            "mode roundtrip: a saturation row (rate max) runs one-way (--mode one-way); a relay "
            "echoing every message would share the link and CPU with the messages measured", "mode",
        )  # fmt: skip
    if not (case.duration_s > 0 and math.isfinite(case.duration_s)):
        raise PerfInputError(f"duration: {case.duration_s!r} s, must be a positive number", "duration_s")
    if case.subscribers < 1:
        raise PerfInputError(f"subscribers: {case.subscribers}, must be at least 1", "subscribers")
    if case.mode not in MODES:
        raise PerfInputError(f"mode {case.mode!r}: use {' or '.join(MODES)}", "mode")


def _check_settings(case: PerfCase, profiles: dict | None) -> None:
    from fieldtest.netem import ProfileError
    from fieldtest.qos import QosError, get_qos
    from fieldtest.security.securitysettings import SecuritySettingError

    checks = (
        ("qos", lambda: get_qos(case.qos)),
        ("security", lambda: registry.get(case.middleware).security_setting(case.security)),
        ("network", lambda: case.network == "loopback" or link_profile(case, profiles)),
    )
    for name, check in checks:
        try:
            check()
        except (QosError, SecuritySettingError, ProfileError, KeyError, ValueError) as exc:
            raise PerfInputError(str(exc).strip("'\""), name) from None


def _check_link_rate(case: PerfCase, message: PerfMessage, profiles: dict | None) -> None:
    """A rate the emulated link cannot carry is refused: the payload alone would exceed it."""
    if case.network == "loopback" or case.saturated:
        return  # saturation: the link's rate is what it measures
    profile = link_profile(case, profiles)
    need_kbit = message.size * 8 * case.rate_hz / 1000 * case.subscribers
    for name, direction in (("up", profile.up), ("down", profile.down)):
        if direction.rate_kbit is not None and need_kbit > direction.rate_kbit:
            raise CombinationRefused(
                f"rate: {message.name} at {case.rate_hz:g} Hz needs {need_kbit:,.0f} kbit/s, more than "
                f"the {case.network} link's {name} rate {direction.rate_kbit:,.0f} kbit/s"
            )


def run_row(
    case: PerfCase,
    row_dir: Path,
    *,
    discovery_s: float = 20.0,
    drain_s: float = 3.0,
    stop: threading.Event | None = None,
    domain_id: int = 30,
    profiles: dict | None = None,
    relay_work_s: float = 0.0,
    late_grace_s: float = LATE_GRACE_S,
) -> PerfRow:
    """Run ``case`` in ``row_dir``: a PerfRow, failed with its reason rather than raising (bad input
    is recorded as refused; a row ``stop`` cut short, interrupted). ``relay_work_s``: time each
    relay spends on every message (a slow subscriber, to see a middleware's loss and flow control
    under load); ``late_grace_s``: how long after its planned end the row still receives, counting
    what comes then as late."""
    try:
        message = check_case(case, profiles)
    except PerfInputError as exc:
        return PerfRow(case, status="refused", error=str(exc))
    row_dir.mkdir(parents=True, exist_ok=True)
    offsets = registry.get(case.middleware).dds_domain_offsets(case.transport())  # bridged: both sides'
    try:
        raise_if_stopped(stop)
        with lease_dds_domain(domain_id, offsets=offsets) as lease, _Link(case, profiles) as link:
            config = link.config(case, lease.domain_id, row_dir)
            spec = {
                "transport": config.model_dump(), "message": case.message, "rate_hz": case.rate_hz,
                "duration_s": case.duration_s, "mode": case.mode, "relays": case.subscribers,
                "discovery_s": discovery_s, "drain_s": drain_s, "late_grace_s": late_grace_s,
                "relay_addresses": link.relay_addresses(case.subscribers), "relay_work_s": relay_work_s,
            }  # fmt: skip
            (row_dir / "spec.json").write_text(json.dumps(spec, indent=1))
            with (
                _infrastructure(config, row_dir, link) as infra,
                _robot_link_traffic(link, row_dir) as traffic,
            ):
                records, processes = _run_processes(
                    case, config, row_dir, link, infra, stop, discovery_s + drain_s + late_grace_s
                )
            row = reduce_row(case, message, records)
            row.processes = processes
            row.link = {**link.describe(), "traffic": traffic}
            return judge_row(row)
    except Interrupted:
        return interrupted_row(case, stop)
    except (FieldtestError, OSError) as exc:
        return PerfRow(case, status="failed", error=_one_line(str(exc)))


def interrupted_row(case: PerfCase, stop: threading.Event | None) -> PerfRow:
    """A row a stop signal cut short: no figures (its partial records stay in its folder)."""
    return PerfRow(case, status="interrupted", error=interruption(stop))


def _one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "failed"


class _Link:
    """Loopback, or the twin's emulated link: host, robot (and robot2.. for more subscribers) and
    the middleware's own router/broker machine, each in a namespace (``fieldtest.netem``)."""

    def __init__(self, case: PerfCase, profiles: dict | None = None):
        self.topo: Topology | LoopbackTopology | None = None
        self.infra_node: str | None = None
        self.robots = ["robot", *(f"robot{i}" for i in range(2, case.subscribers + 1))]
        if case.network == "loopback":
            return
        from fieldtest.netem import open_topology
        from fieldtest.netem.placement import wireless_nodes

        extra = registry.get(case.middleware).emulated_nodes()
        self.infra_node = extra[0] if extra else None
        profile = link_profile(case, profiles)
        wireless = wireless_nodes("seed", profile, self.infra_node)
        if "robot" in wireless:
            wireless += self.robots[1:]
        nodes = ["host", *self.robots, *extra]
        self.topo = open_topology(profile, nodes=nodes, wireless=wireless, vpn=case.vpn)

    def __enter__(self) -> _Link:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.topo is not None:
            self.topo.close()

    @property
    def emulated_topo(self) -> Topology | None:
        if self.topo is None:
            return None
        from fieldtest.netem.topology import emulated_topology

        return emulated_topology(self.topo)

    @property
    def emulated(self) -> bool:
        return self.emulated_topo is not None

    def prefix(self, node: str) -> list[str]:
        topo = self.emulated_topo
        return topo.command(node, []) if topo is not None else []

    def config(self, case: PerfCase, domain_id: int, row_dir: Path) -> TransportConfig:
        config = case.transport(domain_id=domain_id).with_ports(free_port)
        if (topo := self.emulated_topo) is not None:
            addr = topo.address
            infra = addr(self.infra_node) if self.infra_node else addr("host")
            config = config.model_copy(
                update={
                    "host_address": addr("host"),
                    "robot_address": addr("robot"),
                    "router_address": infra,
                    "broker_address": infra,
                }  # fmt: skip
            )
        return _secured(config, case, row_dir)

    def relay_addresses(self, count: int) -> dict[str, dict]:
        """Each extra relay's own address (its DDS binds there; it reaches the others through the
        router, broker or DDS discovery)."""
        topo = self.emulated_topo
        if topo is None:
            return {}
        return {str(i): {"robot_address": topo.address(f"robot{i}")} for i in range(2, count + 1)}

    def describe(self) -> dict:
        if self.topo is None:
            return {"profile": "loopback"}
        described = self.topo.describe()
        out = {"profile": described.get("profile", {}).get("name", ""), "emulated": self.emulated,
               "backend": described.get("backend", "")}  # fmt: skip
        if "vpn" in described:  # the tunnel the row's traffic crossed the link in
            out["vpn"] = described["vpn"]
        simulator = getattr(self.topo, "simulator_record", lambda: None)()
        if simulator:  # the ns-3 802.11 link: frames, retries by size class, MAC drops, lag
            out["simulator"] = simulator
        if (topo := self.emulated_topo) is not None:  # the forwarders' lateness, as a trial keeps it
            from fieldtest.netem.forwarder import ForwarderError

            try:
                if forwarder := topo.link_stats():
                    out["forwarder"] = forwarder
            except ForwarderError as exc:
                out["forwarder"] = {"error": str(exc)}
        return out


def _secured(config: TransportConfig, case: PerfCase, row_dir: Path) -> TransportConfig:
    """The row's keystore, made and checked as a trial's (``fieldtest.security.trialsecurity``)."""
    if case.security == "none":
        return config
    from fieldtest.middleware.registry import prepare_trial_security
    from fieldtest.record import TrialRequest

    request = TrialRequest(name="perf", transport=config)
    return prepare_trial_security(request, row_dir).transport


@contextlib.contextmanager
def _robot_link_traffic(link: _Link, row_dir: Path) -> Iterator[dict]:
    """A dict filled, when the block ends, with the robot link's packets and bytes per second by
    kind (``fieldtest.netem.linktraffic``, as a trial records them); empty on loopback, and the
    reason under "error" where the capture cannot run."""
    traffic: dict = {}
    if not link.emulated:
        yield traffic
        return
    from fieldtest.netem.linktraffic import CAPTURE_FILE, CaptureError, LinkCapture
    from fieldtest.netem.topology import IFACE

    capture = LinkCapture(link.prefix("robot"), IFACE, row_dir / CAPTURE_FILE)
    started = True
    try:
        capture.start()
    except CaptureError as exc:
        started = False
        traffic.update(node="robot", error=f"no link traffic record: {exc}")
    try:
        yield traffic
    finally:
        if started:
            try:
                traffic.update(node="robot", **capture.stop())
            except CaptureError as exc:
                traffic.update(node="robot", error=str(exc))


@contextlib.contextmanager
def _infrastructure(config: TransportConfig, row_dir: Path, link: _Link) -> Iterator[ManagedProcess | None]:
    middleware = registry.get(config.middleware)
    if middleware.bridged(config):  # the lab's own processes route instead (_start_side_processes)
        yield None
        return
    prefix = link.prefix(middleware.infra_node) if middleware.infra_process else []
    infra = registry.infrastructure(config, row_dir, prefix=prefix, realtime=True)
    if infra is None:
        yield None
        return
    with infra:
        yield infra


def _run_processes(
    case: PerfCase,
    config: TransportConfig,
    row_dir: Path,
    link: _Link,
    infra: ManagedProcess | None,
    stop: threading.Event | None,
    tail_s: float,
) -> tuple[dict, dict]:
    """The middleware's side processes (bridges), relays (each READY), then the main side, none
    after a stop signal (``lifecycle.start_in_order``); wait for it; stop the relays and the side
    processes on every way out; their records (``Interrupted`` instead after a stop signal)."""
    procs = ProcessGroup(row_dir / "logs")
    sampler = _Sampler(procs, infra)
    spec = str(row_dir / "spec.json")
    names = [f"relay{i}" for i in range(1, case.subscribers + 1)]
    env: dict[str, str] = {}

    def side_processes() -> None:
        env.update(_start_side_processes(config, row_dir, procs, link)[1])

    def relay(index: int, name: str, node: str) -> Callable[[], None]:
        args = [spec, "--role", "relay", "--index", str(index), "--out", str(row_dir / f"{name}.json")]
        return lambda: _start_node(procs, name, args, link.prefix(node), env)

    def relays_ready() -> None:
        for name in names:
            procs.wait_ready(name, marker=READY, timeout_s=START_TIMEOUT_S)

    def main() -> None:
        args = [spec, "--role", "main", "--out", str(row_dir / "main.json")]
        _start_node(procs, "main", args, link.prefix("host"), env)

    relays = [relay(i, name, node) for i, (name, node) in enumerate(zip(names, link.robots, strict=True), 1)]
    try:
        start_in_order((side_processes, *relays, relays_ready, main), stop)
        _wait_main(procs, case, stop, sampler, tail_s)
    finally:
        sampler.sample()
        # every process started, the side processes (bridges) last: the nodes' last messages cross them
        for name in dict.fromkeys(["main", *names, *procs.procs]):
            if name in procs.procs:
                procs.stop(name)
    raise_if_stopped(stop)  # cut short: the records are partial
    summary = sampler.summary()
    for name, realtime in procs.realtime().items():
        summary.setdefault(name, {})["realtime"] = realtime
    if infra is not None and infra.name in summary:
        summary[infra.name]["realtime"] = infra.realtime_requested
    return _records(row_dir, procs, names), summary


def _start_node(
    procs: ProcessGroup, name: str, args: list[str], prefix: list[str], env: dict[str, str]
) -> None:
    """A perf node at SCHED_FIFO where permitted, as the twin's processes: on a busy machine its
    figures are then the stack's, not the run queue's (``FIELDTEST_REALTIME=0`` turns it off)."""
    procs.start(name, [*prefix, sys.executable, "-m", "fieldtest.perf.node", *args], env, realtime=True)


def _start_side_processes(
    config: TransportConfig, row_dir: Path, procs: ProcessGroup, link: _Link
) -> tuple[list[str], dict[str, str]]:
    """The lab's own processes on the middleware's path, as a twin trial starts them (bridged Zenoh:
    zenohd as router and the two bridges, configs in ``bridges/``), each on its node and sampled
    with the row's processes; (their names, the environment of the perf nodes)."""
    placed, env = registry.get(config.middleware).twin_side_processes(
        config, BRIDGED_CMD_TYPE, row_dir / "bridges"
    )
    for node, proc in placed:
        procs.start(proc.name, [*link.prefix(node), *proc.argv], proc.env, realtime=True)
    return [proc.name for _node, proc in placed], env


def _wait_main(
    procs: ProcessGroup, case: PerfCase, stop: threading.Event | None, sampler: _Sampler, tail_s: float
) -> None:
    main = procs.procs["main"].popen
    deadline = time.monotonic() + case.duration_s + tail_s + ROW_MARGIN_S
    while main.poll() is None:
        if stop is not None and stop.is_set():
            procs.stop("main")  # it writes what it has; the row is an interrupted one
            return
        if time.monotonic() > deadline:
            procs.stop("main")
            raise ProcessStartError(
                f"the main side did not finish within {ROW_MARGIN_S:g} s of the row's end"
            )
        for name, proc in procs.procs.items():
            if name != "main" and proc.popen.poll() is not None:
                raise ProcessStartError(
                    f"{name} exited with code {proc.popen.returncode}: {procs.tail(name)}"
                )
        sampler.sample()
        time.sleep(0.2)
    if main.returncode == EXIT_NO_RELAY:
        record = json.loads((procs.log_dir.parent / "main.json").read_text())
        raise ProcessStartError(
            f"relay(s) {record['silent_relays']} {NO_LINK} in {record['discovery_s']:g} s of warm-up "
            "pings: no link between host and robot, or discovery on a lossy link needs a longer "
            "--discovery-timeout"
        )
    if main.returncode != 0:
        raise ProcessStartError(f"main exited with code {main.returncode}: {procs.tail('main')}")


def _records(row_dir: Path, procs: ProcessGroup, names: list[str]) -> dict:
    out = {}
    for name in ["main", *names]:
        path = row_dir / f"{name}.json"
        if not path.exists():
            where = procs.tail(name) if name in procs.procs else "not started"
            raise ProcessStartError(f"{name} left no record: {where}")
        out[name] = json.loads(path.read_text())
    return out


class _Sampler:
    """CPU seconds and peak RSS of every process of the row (psutil), the router/broker included."""

    def __init__(self, procs: ProcessGroup, infra: ManagedProcess | None) -> None:
        self.procs = procs
        self.infra = infra
        self.rss_kb: dict[str, int] = {}
        self.cpu_s: dict[str, float] = {}
        self.started = time.monotonic()

    def _pids(self) -> dict[str, int]:
        pids = {name: p.popen.pid for name, p in self.procs.procs.items() if p.popen.poll() is None}
        if self.infra is not None and self.infra.running() and self.infra.pid is not None:
            pids[self.infra.name] = self.infra.pid
        return pids

    def sample(self) -> None:
        import psutil

        for name, pid in self._pids().items():
            try:
                proc = psutil.Process(pid)
                with proc.oneshot():
                    # ``ip netns exec`` execs, so the pid is the Python process itself
                    self.rss_kb[name] = max(self.rss_kb.get(name, 0), proc.memory_info().rss // 1024)
                    times = proc.cpu_times()
                    self.cpu_s[name] = times.user + times.system + times.children_user + times.children_system
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue

    def summary(self) -> dict:
        wall = max(time.monotonic() - self.started, 1e-9)
        return {
            name: {
                "cpu_s": round(cpu, 3),
                "cpu_percent": round(100 * cpu / wall, 2),
                "rss_max_kb": self.rss_kb.get(name, 0),
            }  # fmt: skip
            for name, cpu in self.cpu_s.items()
        }
