"""Run digital-twin trials: every part in its own OS process, as on the real machines.

Start order: broker/router (if the middleware has one) -> NatNet emulator -> mocap recorder ->
twin robot -> host streamer. The host ends the trial; everything else is then stopped with SIGTERM,
cut-off bags are repaired, ``trial.yaml`` gets its outcome and the analysis writes the report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.catalog import uses_setting
from fieldtest.machine import MachineMonitor
from fieldtest.middleware import registry
from fieldtest.plan import SquarePlan
from fieldtest.procs import (
    DomainLease,
    ProcessGroup,
    ProcessStartError,
    free_port,
    interruption,
    lease_dds_domain,
    run_stop_event,
)
from fieldtest.record import (
    ANALYSIS_DIR,
    HOST_BAG,
    MOCAP_BAG,
    ROBOT_BAG,
    TrialRecord,
    TrialRequest,
    new_trial_id,
    read_bag,
    read_trial,
    repair_bag,
    software_versions,
    write_trial,
)
from fieldtest.security.trial import prepare_trial_security
from fieldtest.twin.fwdprobe import READY as FORWARD_PROBE_READY

if TYPE_CHECKING:
    from fieldtest.analysis.metrics import Metrics
    from fieldtest.procs import ManagedProcess

DEFAULT_RUNS_DIR = Path("trials/runs")
QUICK_PLAN = SquarePlan(side_duration_s=1.0, laps=2, start_delay_s=0.5)
# On loopback with no imperfections the stack itself must add no drift (issue #3): lap N vs lap 1.
STACK_DRIFT_LIMIT_M = 0.001
STOP_ORDER = [
    "host",
    "robot",
    "recorder",
    "natnet",
    "fwdprobe",
]  # the host first: its stop burst needs a robot
BRIDGE_PROCESSES = ("bridge_host", "bridge_robot", "router")  # bridged Zenoh; stopped after the above
FORWARD_PROBE_FILE = "logs/forward_probe.json"
STOP_GRACE_S = 1.5  # after the host ends: time for the robot to log the stop burst and halt


@dataclass
class TrialResult:
    trial_dir: Path
    end_reason: str
    detail: str = ""


def _lease_domain(request: TrialRequest, preferred: int) -> DomainLease:
    """A DDS domain no other run on this machine uses (bridged Zenoh: the robot side's too), held
    until the trial ends: two runs on one domain hear each other's hosts."""
    transport = request.transport
    return lease_dds_domain(
        preferred, offsets=registry.get(transport.middleware).dds_domain_offsets(transport)
    )


def _assign_ports(request: TrialRequest, domain_id: int) -> TrialRequest:
    """Free ports and the leased DDS domain per trial, so trials can run side by side on one machine."""
    transport = request.transport.model_copy(
        update={"zenoh_port": free_port(), "mqtt_port": free_port(), "domain_id": domain_id}
    )
    twin = request.twin.model_copy(
        update={
            "natnet_command_port": free_port(2),
            "natnet_data_port": free_port(2),
            "truth_port": free_port(2),
        }
    )
    return request.model_copy(update={"transport": transport, "twin": twin})


class _Network:
    """Where each process runs: all on loopback, or each in its own namespace on emulated links."""

    def __init__(self, request: TrialRequest):
        self.topo = None
        self.truth_socket = ""
        self.infra_node: str | None = None  # the router's or broker's own machine, if it has one
        self.capture = None  # the robot link's LinkCapture while the trial runs
        if request.network != "loopback":
            from fieldtest.netem import get_profile, open_topology
            from fieldtest.netem.placement import wireless_nodes

            extra = registry.get(request.transport.middleware).emulated_nodes()
            self.infra_node = extra[0] if extra else None
            wireless = wireless_nodes(request.topology, get_profile(request.network), self.infra_node)
            self.topo = open_topology(
                request.network, nodes=["host", "robot", "mocap", *extra], wireless=wireless
            )

    @property
    def emulated(self) -> bool:
        return self.topo is not None and getattr(self.topo, "emulated", False)

    def prefix(self, node: str) -> list[str]:
        return self.topo.command(node, []) if self.emulated else []

    def apply(self, request: TrialRequest) -> TrialRequest:
        """Addresses of the namespaces in the request, so every process finds its peers."""
        if not self.emulated:
            return request
        addr = self.topo.address
        nodes = self.topo_nodes()
        transport = request.transport.model_copy(
            update={
                "host_address": addr("host"),
                "robot_address": addr("robot"),
                "router_address": addr("router") if "router" in nodes else addr("host"),
                "broker_address": addr("broker") if "broker" in nodes else addr("host"),
            }
        )
        truth = self.truth_socket = (
            f"/tmp/fieldtest-truth-{uuid.uuid4().hex[:12]}.sock"  # Unix paths: max 107 bytes
        )
        twin = request.twin.model_copy(update={"natnet_address": addr("mocap"), "truth_socket": truth})
        return request.model_copy(update={"transport": transport, "twin": twin})

    def placement(self) -> dict[str, str]:
        """Each machine -> its link: the profile's name where emulated, else "wired"."""
        if not self.emulated:
            return {}
        return {node: info["link"] for node, info in self.topo.describe()["nodes"].items()}

    def topo_nodes(self) -> list[str]:
        return list(getattr(self.topo, "nodes", []) or getattr(self.topo, "links", {}).keys())

    def check_faults(self, faults: list[dict]) -> None:
        """Refuse before the trial starts a profile change its link cannot make (an 802.11 link)."""
        from fieldtest.netem import TopologyError

        for fault in faults:
            if fault.get("kind") == "profile" and self.emulated:
                try:
                    self.topo.check_profile_change(fault["profile"])
                except (TopologyError, ValueError) as exc:
                    raise ProcessStartError(f"faults: {exc}") from None

    def schedule_faults(self, faults: list[dict], stream_start_ns: int) -> None:
        if not faults:
            return
        if not self.emulated:
            raise ProcessStartError("link faults need an emulated network (network namespaces)")
        t0_mono = time.monotonic_ns() - (time.time_ns() - stream_start_ns)
        for fault in faults:
            if fault.get("kind") == "outage":
                self.topo.schedule_outage(float(fault["at_s"]), float(fault["duration_s"]), t0_ns=t0_mono)
            elif fault.get("kind") == "profile":
                self.topo.set_profile(fault["profile"], at_s=float(fault["at_s"]), t0_ns=t0_mono)
            else:
                raise ProcessStartError(f"unknown fault kind {fault.get('kind')!r} (outage or profile)")

    def start_capture(self, trial_dir: Path) -> str | None:
        """Capture the robot's emulated link for the trial (None), or say why not (a warning)."""
        if not self.emulated:
            return None
        from fieldtest.netem.linktraffic import CAPTURE_FILE, CaptureError, LinkCapture
        from fieldtest.netem.topology import IFACE

        self.capture = LinkCapture(self.prefix("robot"), IFACE, trial_dir / CAPTURE_FILE)
        try:
            self.capture.start()
        except CaptureError as exc:
            self.capture = None
            return f"no link traffic record: {exc}"
        return None

    def stop_capture(self) -> dict:
        """Packets and bytes per second by kind on the robot's link ({} without a capture)."""
        from fieldtest.netem.linktraffic import CaptureError

        capture, self.capture = self.capture, None
        if capture is None:
            return {}
        try:
            return {"node": "robot", **capture.stop()}
        except CaptureError as exc:
            return {"node": "robot", "error": str(exc)}

    def link_simulator(self) -> dict | None:
        """The ns-3 802.11 link's lag, CPU and frames by kind (None for other links)."""
        return self.topo.simulator_record() if self.emulated else None

    def close(self) -> None:
        if self.topo is not None:
            self.topo.close()
        if self.truth_socket:
            with contextlib.suppress(OSError):
                Path(self.truth_socket).unlink()


def _fault_records(faults: list[dict], stream_start_ns: int | None) -> list[dict]:
    """Faults as the analysis reads them: kind, start_ns on the host clock, duration_s, detail."""
    out = []
    for fault in faults:
        start = None if stream_start_ns is None else stream_start_ns + round(float(fault["at_s"]) * 1e9)
        row = {"kind": fault["kind"], "start_ns": start, "detail": str(fault.get("profile", ""))}
        if "duration_s" in fault:
            row["duration_s"] = float(fault["duration_s"])
        out.append(row)
    return out


@contextlib.contextmanager
def _infrastructure(request: TrialRequest, trial_dir: Path, net: _Network) -> Iterator[ManagedProcess | None]:
    """The router or broker the middleware needs, stopped on every exit path; its output is saved as
    ``logs/<router|broker>.log``. Real-time like the twin's processes: it forwards every command."""
    middleware = registry.get(request.transport.middleware)
    if middleware.infra_process is None or _bridged(request):  # bridged: zenohd routes (_start_bridges)
        yield None
        return
    prefix = net.prefix(middleware.infra_node)
    infra = middleware.infrastructure(request.transport, trial_dir, prefix=prefix, realtime=True)
    log_path = trial_dir / "logs" / f"{middleware.infra_process}.log"
    try:
        with infra:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(f"# fieldtest: {infra.name} pid {infra.pid}, real-time {infra.realtime}\n")
            yield infra
    finally:
        with log_path.open("a") as log:
            log.write(infra.output() + "\n")


def _natnet_args(request: TrialRequest, trial_dir: Path) -> tuple[list[str], list[str]]:
    """Command lines of the OptiTrack emulator and the mocap recorder, from the twin settings."""
    twin = request.twin
    mode = "multicast" if twin.natnet_multicast else "unicast"
    common = [
        "--mode", mode, "--command-port", str(twin.natnet_command_port),
        "--data-port", str(twin.natnet_data_port), "--up-axis", twin.mocap_up_axis,
    ]  # fmt: skip
    serve = [
        "serve", *common, "--bind", twin.natnet_address,
        "--rate", f"{twin.mocap_rate_hz:g}", "--noise-mm", f"{twin.mocap_noise_m * 1000:g}",
        "--invalid-prob", f"{twin.mocap_dropout:g}", "--seed", str(request.seed),
        "--source", "feed", *(["--feed-bind", twin.truth_socket] if twin.truth_socket else []),
        "--feed-port", str(twin.truth_port), "--realtime",
    ]  # fmt: skip
    record = [
        "record", str(trial_dir / MOCAP_BAG), *common, "--server", twin.natnet_address,
        "--rigid-body-id", str(request.rigid_body_id),
    ]  # fmt: skip
    return serve, record


def _bridged(request: TrialRequest) -> bool:
    return registry.get(request.transport.middleware).bridged(request.transport)


def _with_twin_defaults(request: TrialRequest) -> TrialRequest:
    """The middleware's twin defaults for what the request left unset (Zenoh: the bridged path)."""
    transport = request.transport
    updated = registry.get(transport.middleware).twin_defaults(transport, transport.model_fields_set)
    return request if updated is transport else request.model_copy(update={"transport": updated})


def _start_bridges(
    request: TrialRequest, trial_dir: Path, procs: ProcessGroup, net: _Network
) -> dict[str, str]:
    """The lab's own processes on the middleware's path (bridged Zenoh: zenohd as router and the two
    bridges, with the lab's generated configs in ``trial/bridges/``), fresh for this trial. Returns
    the environment of the twin's host and robot."""
    middleware = registry.get(request.transport.middleware)
    placed, side_env = middleware.twin_side_processes(
        request.transport, request.cmd_type, trial_dir / "bridges"
    )
    for node, proc in placed:
        # real-time like the direct path's router and the brokers: they forward every command
        procs.start(proc.name, [*net.prefix(node), *proc.argv], proc.env, realtime=True)
    return side_env


def _start_forward_probe(request: TrialRequest, trial_dir: Path, procs: ProcessGroup, net: _Network) -> bool:
    """The router's or broker's own forwarding delay, probed on its node (fieldtest.twin.fwdprobe).
    Not with security on: the probe has no identity of its own in the trial's access control."""
    middleware = registry.get(request.transport.middleware)
    if middleware.infra_process is None or request.transport.security != "none":
        return False
    args = ["--trial-dir", str(trial_dir), "--out", str(trial_dir / FORWARD_PROBE_FILE)]
    procs.start_python("fwdprobe", "fieldtest.twin.fwdprobe", args, prefix=net.prefix(middleware.infra_node))
    return True


def _start_trial_processes(
    request: TrialRequest, trial_dir: Path, procs: ProcessGroup, net: _Network
) -> None:
    side_env = _start_bridges(request, trial_dir, procs, net)
    probing = _start_forward_probe(request, trial_dir, procs, net)
    serve, record = _natnet_args(request, trial_dir)
    procs.start_python("natnet", "fieldtest.natnet", serve, prefix=net.prefix("mocap"))
    procs.wait_ready("natnet", marker="NatNet emulator:")
    # on the ground-truth machine, wired: where the host sits must not move the truth's time stamps
    procs.start_python("recorder", "fieldtest.natnet", record, prefix=net.prefix("mocap"))
    procs.wait_ready("recorder", marker="mocap recorder:")
    arg = ["--trial-dir", str(trial_dir)]
    procs.start_python("robot", "fieldtest.twin.robot", arg, side_env, prefix=net.prefix("robot"))
    procs.wait_ready("robot", timeout_s=30.0)
    if probing:
        procs.wait_ready("fwdprobe", marker=FORWARD_PROBE_READY, timeout_s=30.0)
    procs.start_python("host", "fieldtest.twin.host", arg, side_env, prefix=net.prefix("host"))


def _stream_start_ns(procs: ProcessGroup) -> int | None:
    match = re.search(r"STREAM start_ns=(\d+)", procs.procs["host"].log_path.read_text(errors="replace"))
    return int(match.group(1)) if match else None


def _wait_for_host(
    procs: ProcessGroup,
    request: TrialRequest,
    net: _Network,
    progress: Callable[[float], None],
    kill_host_at_s: float | None,
    stop: threading.Event | None = None,
) -> None:
    plan = request.plan
    host = procs.procs["host"]
    started = time.monotonic()
    limit = plan.total_s + 30.0
    faults_scheduled = not request.faults
    start_ns = None
    while host.popen.poll() is None:
        if stop is not None and stop.is_set():
            raise KeyboardInterrupt  # Ctrl-C reached the main thread: stop as an interruption
        if start_ns is None:
            start_ns = _stream_start_ns(procs)
        if not faults_scheduled and start_ns is not None:
            net.schedule_faults(request.faults, start_ns)
            faults_scheduled = True
        elapsed = time.monotonic() - started
        progress(min(elapsed / plan.total_s, 1.0))
        procs.sample_cpu()
        # stream time, not time since the host process started: its start-up varies with the machine
        stream_s = None if start_ns is None else (time.time_ns() - start_ns) / 1e9
        if kill_host_at_s is not None and stream_s is not None and stream_s >= kill_host_at_s:
            host.popen.send_signal(signal.SIGKILL)
            host.popen.wait()
            break
        if elapsed > limit:
            procs.stop("host")
            break
        for name in ("robot", "natnet", "recorder", *BRIDGE_PROCESSES):
            if name not in procs.procs:
                continue
            code = procs.procs[name].popen.poll()
            if code is not None:
                raise ProcessStartError(f"{name} exited with code {code} mid-trial: {procs.tail(name)}")
        time.sleep(0.1)
    progress(1.0)


def _end_reason(host_code: int | None) -> tuple[str, str]:
    if host_code == 0:
        return "completed", ""
    if host_code in (-signal.SIGKILL, 137):
        return "host-killed", "the host streamer was killed (SIGKILL): no stop burst was sent"
    if host_code in (130, -signal.SIGINT, -signal.SIGTERM, 143):
        return "host-stopped", f"the host streamer was stopped (exit {host_code}) after its stop burst"
    return "error", f"the host streamer exited with code {host_code}"


_EMULATOR_SUMMARY = re.compile(r"NatNet emulator: (\d+) frames generated, (\d+) sent, (\d+) skipped late")


def _mocap_stack_faults(procs: ProcessGroup) -> dict:
    """The NatNet emulator's own lateness: frames it skipped because it woke too late to send them."""
    proc = procs.procs.get("natnet")
    text = proc.log_path.read_text(errors="replace") if proc is not None and proc.log_path.exists() else ""
    found = _EMULATOR_SUMMARY.findall(text)
    if not found:
        return {}
    generated, sent, skipped = (int(v) for v in found[-1])
    return {"frames_generated": generated, "frames_sent": sent, "frames_skipped_late": skipped}


def _finish_record(
    trial_dir: Path,
    procs: ProcessGroup,
    reason: str,
    detail: str,
    link: dict,
    machine: dict | None = None,
    link_simulator: dict | None = None,
    link_traffic: dict | None = None,
) -> None:
    record = read_trial(trial_dir)  # the robot and host may have added their own outcome fields
    outcome = record.outcome
    outcome.link_traffic = link_traffic or {}
    if machine:
        outcome.stack["machine"] = machine
    if link_simulator:  # a simulated link that fell behind real time makes the trial invalid
        outcome.stack["link_simulator"] = link_simulator
    if mocap := _mocap_stack_faults(procs):
        outcome.stack["mocap"] = mocap
    if (probe := trial_dir / FORWARD_PROBE_FILE).exists():
        outcome.stack["forwarding"] = json.loads(probe.read_text())
    outcome.link = link
    outcome.faults = _fault_records(record.request.faults, outcome.stream_start_ns)
    outcome.end_reason, outcome.end_detail = reason, detail  # type: ignore[assignment]
    outcome.cpu = procs.cpu()
    if realtime := procs.realtime():  # routers, brokers, bridges: did each run at SCHED_FIFO
        outcome.stack["realtime"] = realtime
    for bag in (HOST_BAG, ROBOT_BAG, MOCAP_BAG):
        if (trial_dir / bag).exists() and read_bag(trial_dir / bag).truncated:
            repair_bag(trial_dir / bag)
            outcome.warnings.append(f"{bag} bag was cut off mid-write and repaired up to the cut")
    write_trial(trial_dir, record)


def run_twin_trial(
    request: TrialRequest,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    progress: Callable[[float], None] = lambda _: None,
    domain_id: int = 0,
    kill_host_at_s: float | None = None,
    stop: threading.Event | None = None,
) -> TrialResult:
    """Run one trial end to end (without the analysis) and return where it is. ``kill_host_at_s``
    (tests): SIGKILL the host at that stream time (seconds after plan tick 0). Setting ``stop``
    (Ctrl-C in another thread) ends it as an interruption: the host first, with its stop burst.
    ``domain_id`` is the preferred DDS domain: the trial leases the first free one from there
    (``fieldtest.procs.lease_dds_domain``) for its whole run."""
    request = _with_twin_defaults(request)
    with _lease_domain(request, domain_id) as lease:
        request = _assign_ports(request, lease.domain_id)  # trial.yaml records the domain it used
        trial_dir = runs_dir / new_trial_id(request.name)
        net = _Network(request)
        try:
            return _run_in_network(request, trial_dir, net, progress, kill_host_at_s, stop)
        finally:
            net.close()


def _measure_link(net: _Network) -> dict:
    if not net.emulated:
        return (
            {"profile": "loopback"}
            if net.topo is None
            else {"profile": "loopback", "note": net.topo.describe()}
        )
    from fieldtest.netem import measure_link

    measured = measure_link(net.topo, "host", "robot", count=50)
    if net.infra_node is not None:  # the host's path to the router/broker machine, by topology
        to_infra = measure_link(net.topo, "host", net.infra_node, count=50)
        measured[f"host_to_{net.infra_node}"] = {k: v for k, v in to_infra.items() if k.startswith(LINK_KEYS)}
    return {"description": net.topo.describe(), **measured}


LINK_KEYS = ("rtt_", "owd_", "loss")  # the figures of a second measured path kept in the record


def _run_in_network(
    request: TrialRequest,
    trial_dir: Path,
    net: _Network,
    progress: Callable[[float], None],
    kill_host_at_s: float | None,
    stop: threading.Event | None = None,
) -> TrialResult:
    request = net.apply(request)
    request = prepare_trial_security(request, trial_dir)  # keystore checked or made; before any process
    record = TrialRecord(trial_id=trial_dir.name, request=request)
    record.outcome.clocks = "shared"  # every twin process reads this machine's clock, namespaces or not
    record.outcome.nodes = net.placement()
    record.outcome.software = software_versions()
    record.outcome.warnings = list(request.plan.warnings())
    if net.topo is not None and not net.emulated:
        record.outcome.warnings.append(f"network {request.network!r} not emulated here: ran on loopback")
    _record_dds_discovery(request, record)
    write_trial(trial_dir, record)
    procs = ProcessGroup(trial_dir / "logs")
    reason, detail, link = "error", "", {}
    monitor = MachineMonitor()  # the machine's own disturbance over the trial (steal, pressure, wake-ups)
    try:
        net.check_faults(request.faults)
        link = _measure_link(net)
        if warning := net.start_capture(trial_dir):  # after the probes, so they stay out of it
            record.outcome.warnings.append(warning)
            write_trial(trial_dir, record)
        with _infrastructure(request, trial_dir, net) as infra:
            try:
                if infra is not None:
                    infra_name = registry.get(request.transport.middleware).infra_process
                    procs.watch(infra_name, infra.proc, realtime=infra.realtime)
                _start_trial_processes(request, trial_dir, procs, net)
                monitor.start()
                _wait_for_host(procs, request, net, progress, kill_host_at_s, stop)
                monitor.stop()  # the window ends with the stream: shutdown work is not the trial's
                time.sleep(STOP_GRACE_S)
                reason, detail = _end_reason(procs.procs["host"].popen.returncode)
            finally:
                # On every path, and before the router or broker goes: the host first, so that its
                # stop burst still reaches a listening robot through them.
                procs.stop_all(order=STOP_ORDER)
    except ProcessStartError as exc:
        reason, detail = "error", str(exc)
    except KeyboardInterrupt:
        reason, detail = "interrupted", interruption(stop)
    finally:
        procs.stop_all(order=STOP_ORDER)  # nothing left to stop unless the router or broker failed
        machine = monitor.stop() if monitor.started else None
        traffic = net.stop_capture()
        _finish_record(trial_dir, procs, reason, detail, link, machine, net.link_simulator(), traffic)
    return TrialResult(trial_dir, reason, detail)


def _record_dds_discovery(request: TrialRequest, record: TrialRecord) -> None:
    """DDS cases: the discovery the participants run, and a warning where loopback forced unicast."""
    transport = request.transport
    if not uses_setting(transport.middleware, "dds_discovery"):
        return
    used = record.outcome.dds_discovery = transport.dds_discovery_used("robot")
    if used != transport.dds_discovery:
        record.outcome.warnings.append(
            f"transport.dds_discovery {transport.dds_discovery!r}: loopback has no multicast, "
            "so the participants discovered by unicast peers (none)"
        )


# Command line -------------------------------------------------------------------------------
def _request_from_args(args: argparse.Namespace, middleware: str) -> TrialRequest:
    plan = QUICK_PLAN if args.quick else SquarePlan()
    name = f"{middleware}-{args.security}-{args.network}-r{args.repetition}"
    return TrialRequest.model_validate(
        {
            "name": name,
            "plan": plan.model_dump(),
            "transport": {
                "middleware": middleware,
                "qos": args.qos,
                "security": args.security,
                "mqtt_nagle": not args.no_nagle,
                "dds_discovery": args.dds_discovery,
            },
            "network": args.network,
            "topology": args.topology,
            "repetition": args.repetition,
            "seed": args.seed,
        }
    )


def _parallel_arg(value: str) -> str:
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        raise argparse.ArgumentTypeError(f"{value!r}: a number of trials (1 or more) or auto")
    return value


def _add_scheduling_args(parser: argparse.ArgumentParser, parallel_default: str) -> None:
    parser.add_argument(
        "--parallel",
        type=_parallel_arg,
        default=parallel_default,
        help=f"trials run side by side: a number, or auto (from the cores left free; default {parallel_default})",
    )
    parser.add_argument(
        "--rerun-invalid",
        type=int,
        default=1,
        metavar="N",
        help="re-run a trial invalid by the machine's own timing faults up to N times, alone (default 1)",
    )


def _add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="two short laps instead of the 96 s plan")
    parser.add_argument("--security", default="none", help="security setting (default none)")
    parser.add_argument("--network", default="loopback", help="link profile (default loopback)")
    parser.add_argument(
        "--topology",
        default="seed",
        choices=("seed", "robot-only", "all"),
        help="which machines sit on the emulated link (default seed: host and robot, on 4g the broker/router too)",
    )
    parser.add_argument(
        "--no-nagle",
        action="store_true",
        help="MQTT: TCP_NODELAY on the clients (default: Nagle's algorithm on, as mqtt_client's Paho C)",
    )
    parser.add_argument(
        "--dds-discovery",
        default="spdp",
        choices=("spdp", "all", "none"),
        help="DDS: multicast SPDP discovery as the lab (default), multicast for all, or none (unicast peers)",
    )
    parser.add_argument("--qos", default="default", help="QoS profile name (default: ROS 2 default)")
    parser.add_argument("--repetition", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_RUNS_DIR, help="where trial directories go")


def _run_with_progress(requests: list[TrialRequest], out: Path, stop: threading.Event) -> list[TrialResult]:
    """Run trials side by side (one thread each), with one progress bar per trial. ``stop`` (Ctrl-C,
    SIGTERM or SIGHUP: ``procs.run_stop_event``) stops every trial (each host sends its stop burst);
    returns what they recorded."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description:<36}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as bar, ThreadPoolExecutor(max_workers=len(requests)) as pool:
        tasks = [bar.add_task(r.name, total=1.0) for r in requests]
        futures = [
            pool.submit(
                run_twin_trial, r, out, lambda f, t=t: bar.update(t, completed=f), domain_id=i + 1, stop=stop
            )
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


def _analyse(results: list[TrialResult]) -> list[Metrics | None]:
    """Analyse each trial (metrics.json, report.md, plots); the metrics of each, in order, read
    back through the schema. A trial with nothing to analyse (stopped before it streamed) gets its
    one-line reason and None."""
    from fieldtest.analysis import analyze_trial, read_metrics
    from fieldtest.analysis.metrics import METRICS_FILE

    metrics = []
    for result in results:
        try:
            analyze_trial(result.trial_dir)
            metrics.append(read_metrics(result.trial_dir / ANALYSIS_DIR / METRICS_FILE))
        except ValueError as exc:  # AnalysisError, TrialFormatError, BagError: one line naming the file
            print(f"{result.trial_dir.name}: not analysed: {str(exc).splitlines()[0]}", file=sys.stderr)
            metrics.append(None)
    return metrics


def _print_stack_check(
    requests: list[TrialRequest], results: list[TrialResult], metrics: list[Metrics | None]
) -> None:
    """The stack check, for runs where every trial completed (a stopped one has no last lap)."""
    if all(r.end_reason == "completed" for r in results):
        if (check := stack_drift_check(requests, metrics)) is not None:
            print(check)


def stack_drift_check(requests: list[TrialRequest], metrics: list[Metrics | None]) -> str | None:
    """One line on whether the stack added drift: on loopback with no imperfections every trial's
    lap drift should stay within ``STACK_DRIFT_LIMIT_M``. None where that does not apply."""
    if any(r.network != "loopback" or r.faults or r.twin.has_imperfections() for r in requests):
        return None
    figures = []
    for request, m in zip(requests, metrics, strict=True):
        value = m.drift.mean_m if m is not None and m.drift.available else None
        figures.append((request.transport.middleware, value))
    shown = ", ".join(f"{name} {'n/a' if v is None else f'{v * 1000:.1f}'}" for name, v in figures)
    limit_mm = f"{STACK_DRIFT_LIMIT_M * 1000:g} mm"
    over = [name for name, v in figures if v is None or v > STACK_DRIFT_LIMIT_M]
    if not over:
        return f"stack check: lap drift within {limit_mm} on loopback in every trial (mm: {shown})"
    return (
        f"stack check NOT met: lap drift over {limit_mm} (or not measured) on loopback for {', '.join(over)}"
        f" (mm: {shown}); this machine's scheduling adds drift (docs/benchmarks.md, 'Drift on loopback')"
    )


# Scheduling from measured headroom ---------------------------------------------------------
TRIAL_CORES = (
    0.5  # a twin trial's processes need about this much of a core (quick runs: 0.3, docs/benchmarks.md)
)
HEADROOM_SAMPLE_S = 1.0


def parallel_from_headroom(wanted: int, machine: dict, cores: int) -> int:
    """How many trials to run at once: the cores left free (minus what the hypervisor steals)
    divided by what one trial needs; at least 1, at most ``wanted``."""
    free = cores * (1.0 - (machine["busy_pct"] + machine["steal_pct"]) / 100.0)
    return max(1, min(wanted, int(free // TRIAL_CORES)))


def _parallel(arg: str, wanted: int) -> int:
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


def _interrupted(results: list[TrialResult]) -> bool:
    return any(r.end_reason == "interrupted" for r in results)


def _run_batches(
    requests: list[TrialRequest], out: Path, parallel: int, stop: threading.Event
) -> list[TrialResult]:
    """Results in request order; after an interruption no further batch starts, so the list can be
    shorter than ``requests``."""
    results: list[TrialResult] = []
    for start in range(0, len(requests), parallel):
        if stop.is_set():
            break
        results += _run_with_progress(requests[start : start + parallel], out, stop)
    return results


def _validity(m: Metrics | None) -> bool | None:
    """stack.valid: True, False, or None (not analysed, or no stack figures to judge by)."""
    return m.stack.valid if m is not None and m.stack is not None else None


def invalid_trials(metrics: list[Metrics | None]) -> list[int]:
    """Indices of trials whose stack faults made them invalid (metrics stack.valid false)."""
    return [i for i, m in enumerate(metrics) if _validity(m) is False]


def _run_and_rerun(
    requests: list[TrialRequest], out: Path, parallel: int, reruns: int
) -> tuple[list[TrialResult], list[Metrics | None], list[TrialResult], int]:
    """Run, analyse, and re-run each invalid trial up to ``reruns`` times, one at a time (the
    machine was too busy for it). Returns (kept results, their metrics, every result, re-runs).
    An interruption ends the run: the results then cover only the first requests, and nothing is
    re-run. A stop signal during the analysis lets it finish."""
    with run_stop_event() as stop:
        results = _run_batches(requests, out, parallel, stop)
        metrics = _analyse(results)
        every, count = list(results), 0
        for _ in range(reruns):
            todo = invalid_trials(metrics)
            if not todo or stop.is_set():
                break
            print(f"re-running {len(todo)} invalid trial(s) one at a time ...", file=sys.stderr)
            for i in todo:
                if stop.is_set():
                    break
                (again,) = _run_with_progress([requests[i]], out, stop)
                (again_metrics,) = _analyse([again])
                every.append(again)
                count += 1
                if _interrupted([again]):
                    break  # the invalid trial stays the kept one
                results[i], metrics[i] = again, again_metrics
    return results, metrics, every, count


def verdict_lines(requests: list[TrialRequest], metrics: list[Metrics | None], reruns: int = 0) -> list[str]:
    """The final word for a newcomer: valid, or which trials are not, why, and what to do."""
    bad = [(r, m) for r, m in zip(requests, metrics, strict=True) if _validity(m) is False]
    unknown = [r for r, m in zip(requests, metrics, strict=True) if _validity(m) is None]
    rerun_note = f" ({reruns} re-run(s) of invalid trials)" if reruns else ""
    if not bad and not unknown:
        return [f"verdict: VALID - the machine's own timing stayed within bounds in every trial{rerun_note}"]
    lines = []
    if bad:
        lines.append(f"verdict: NOT VALID for {', '.join(r.name for r, _ in bad)}{rerun_note}:")
        for r, m in bad:
            lines.append(f"  {r.name}: {'; '.join(m.stack.invalid_reasons)}")
        lines.append(f"  what to do: {bad[0][1].stack.advice}")
    if unknown:
        lines.append(
            f"verdict: validity unknown for {', '.join(r.name for r in unknown)} (see their report.md)"
        )
    return lines


def trial_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fieldtest trial", description="Run one digital-twin trial.")
    parser.add_argument("--middleware", default="dds", choices=registry.names())
    _add_common_args(parser)
    args = parser.parse_args(argv)
    try:
        requests = [_request_from_args(args, args.middleware)]
        with run_stop_event() as stop:
            results = _run_with_progress(requests, args.out, stop)
    except ValueError as exc:
        print(f"fieldtest trial: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    metrics = _analyse(results)
    for result in results:
        print(f"{result.end_reason}: {result.trial_dir}  report: {result.trial_dir}/analysis/report.md")
    _print_stack_check(requests, metrics=metrics, results=results)
    print("\n".join(verdict_lines(requests, metrics)))
    return _exit_code(results)


def _not_run(requests: list[TrialRequest], results: list[TrialResult]) -> list[TrialRequest]:
    """The requests an interruption left unrun (results cover the first ones), announced."""
    left = requests[len(results) :]
    if left:
        print(f"not run (interrupted): {', '.join(r.name for r in left)}", file=sys.stderr)
    return requests[: len(results)]


def _exit_code(results: list[TrialResult]) -> int:
    """0 if every trial completed, 130 (as for SIGINT) if one was interrupted, else 1."""
    if _interrupted(results):
        return 130
    return 0 if all(r.end_reason == "completed" for r in results) else 1


def demo_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest demo",
        description="The twin trial over every middleware at once, then a comparison report.",
    )
    parser.add_argument("--middlewares", default=",".join(registry.names()), help="comma-separated subset")
    _add_scheduling_args(parser, parallel_default="auto")
    _add_common_args(parser)
    args = parser.parse_args(argv)
    middlewares = [m for m in args.middlewares.split(",") if m]
    unknown = sorted(set(middlewares) - set(registry.names()))
    if unknown:
        print(
            f"fieldtest demo: unknown middleware {', '.join(unknown)} (choose from {', '.join(registry.names())})",
            file=sys.stderr,
        )
        return 2
    requests = [_request_from_args(args, m) for m in middlewares]
    parallel = _parallel(args.parallel, len(requests))
    results, metrics, every, reruns = _run_and_rerun(requests, args.out, parallel, args.rerun_invalid)
    requests = _not_run(requests, results)
    from fieldtest.analysis import compare_trials

    compare_dir = args.out / f"compare-{results[0].trial_dir.name}"
    compare_trials([r.trial_dir for r in every], compare_dir)
    for result in results:
        print(f"{result.end_reason:>12}  {result.trial_dir}/analysis/report.md  {result.detail}")
    print(f"comparison report: {compare_dir / 'compare.md'}")
    _print_stack_check(requests, metrics=metrics, results=results)
    print("\n".join(verdict_lines(requests, metrics, reruns)))
    return _exit_code(results)


def campaign_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest campaign",
        description="Run every trial of a campaign YAML in the twin, analyse each, then compare them.",
    )
    parser.add_argument("campaign_yaml", type=Path, help="e.g. trials/twin-networks.yaml")
    parser.add_argument("--quick", action="store_true", help="two short laps per trial instead of the plan")

    parser.add_argument("--out", type=Path, default=DEFAULT_RUNS_DIR, help="where trial directories go")
    parser.add_argument("--list", action="store_true", help="only list the trials")
    _add_scheduling_args(parser, parallel_default="1")
    args = parser.parse_args(argv)
    from fieldtest.campaign import load_trials

    try:
        campaign, requests = load_trials(args.campaign_yaml)
    except (OSError, ValueError) as exc:
        print(f"fieldtest campaign: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    if args.quick:
        requests = [r.model_copy(update={"plan": QUICK_PLAN}) for r in requests]
    if args.list:
        for request in requests:
            print(request.name)
        return 0
    out = args.out / campaign.campaign
    parallel = _parallel(args.parallel, len(requests))
    results, metrics, every, reruns = _run_and_rerun(requests, out, parallel, args.rerun_invalid)
    planned = len(requests)
    requests = _not_run(requests, results)
    from fieldtest.analysis import compare_trials

    compare_trials([r.trial_dir for r in every], out / "compare")
    failed = [r for r in results if r.end_reason != "completed"]
    for result in failed:
        print(f"{result.end_reason:>12}  {result.trial_dir}  {result.detail}")
    print(
        f"{len(results) - len(failed)}/{planned} trials completed; comparison: {out / 'compare' / 'compare.md'}"
    )
    print("\n".join(verdict_lines(requests, metrics, reruns)))
    return _exit_code(results)
