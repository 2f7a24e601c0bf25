"""One digital-twin trial: every part in its own OS process, as on the real machines, on loopback
or each machine in its own network namespace on emulated links.

Start order: broker/router (if the middleware has one) -> NatNet emulator -> mocap recorder ->
twin robot -> host streamer. The host ends the trial; after a completed run the robot and the recorder
go on until the ground truth holds the rest after the planned end (``lifecycle.record_rest_after_run``);
everything else is then stopped with SIGTERM,
cut-off bags are repaired and ``trial.yaml`` gets its outcome (``fieldtest.lifecycle``, shared
with the lab runner); ``batches`` analyzes it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.lifecycle import (
    Interrupted,
    RecordingProgress,
    TrialResult,
    finish_record,
    host_exit_kind,
    open_record,
    record_rest_after_run,
    start_in_order,
)
from fieldtest.machine import MachineMonitor, MachineReport
from fieldtest.middleware import registry
from fieldtest.middleware.registry import prepare_trial_security
from fieldtest.plan import SquarePlan
from fieldtest.procs import (
    DomainLease,
    ProcessGroup,
    ProcessStartError,
    free_port,
    interruption,
    lease_dds_domain,
)
from fieldtest.record import MOCAP_BAG, TrialRecord, TrialRequest, new_trial_id, write_trial
from fieldtest.twin.fwdprobe import READY as FORWARD_PROBE_READY

if TYPE_CHECKING:
    from fieldtest.linkconfig import Role, TransportConfig
    from fieldtest.netem.linktraffic import LinkCapture
    from fieldtest.netem.topology import LoopbackTopology, Topology
    from fieldtest.procs import ManagedProcess
    from fieldtest.record.trial import EndReason

DEFAULT_RUNS_DIR = Path("trials/runs")
QUICK_PLAN = SquarePlan(side_duration_s=1.0, laps=2, start_delay_s=0.5)
STOP_ORDER = [
    "host",
    "robot",
    "recorder",
    "natnet",
    "fwdprobe",
]  # the host first: its stop burst needs a robot
BRIDGE_PROCESSES = ("bridge_host", "bridge_robot", "router")  # bridged Zenoh; stopped after the above
FORWARD_PROBE_FILE = "logs/forward_probe.json"
MOCAP_STATUS_FILE = "logs/mocap_status.json"  # how far the recorder got (fieldtest.natnet.recorder)
STOP_GRACE_S = 1.5  # after the host ends, at least: time for the robot to log the stop burst and halt


def _lease_domain(request: TrialRequest, preferred: int) -> DomainLease:
    """A DDS domain no other run on this machine uses (bridged Zenoh: the robot side's too), held
    until the trial ends: two runs on one domain hear each other's hosts."""
    transport = request.transport
    return lease_dds_domain(
        preferred, offsets=registry.get(transport.middleware).dds_domain_offsets(transport)
    )


def _assign_ports(request: TrialRequest, domain_id: int) -> TrialRequest:
    """Free ports and the leased DDS domain per trial, so trials can run side by side on one machine."""
    transport = request.transport.with_ports(free_port).model_copy(update={"domain_id": domain_id})
    twin = request.twin.model_copy(
        update={
            "natnet_command_port": free_port(2),
            "natnet_data_port": free_port(2),
            "truth_port": free_port(2),
        }
    )
    return request.model_copy(update={"transport": transport, "twin": twin})


# What the runner chooses for a trial as it starts (_assign_ports, _lease_domain, _Network.apply),
# not what the trial measures: a resumed campaign matches its records without them
RUNNER_CHOSEN_TRANSPORT = (
    "domain_id",
    "host_address",
    "robot_address",
    "router_address",
    "broker_address",
    "wifi_roles",
)
RUNNER_CHOSEN_TWIN = (
    "natnet_address",
    "natnet_command_port",
    "natnet_data_port",
    "truth_port",
    "truth_socket",
)


def as_asked(request: TrialRequest) -> TrialRequest:
    """``request`` as it runs (the family's twin defaults), with what the runner chooses as the
    trial starts put back to the defaults."""
    request = _with_twin_defaults(request)
    transport = request.transport.with_ports(lambda: 0)
    transport = transport.model_copy(
        update={name: type(transport).model_fields[name].default for name in RUNNER_CHOSEN_TRANSPORT}
    )
    twin_fields = type(request.twin).model_fields
    twin = request.twin.model_copy(update={name: twin_fields[name].default for name in RUNNER_CHOSEN_TWIN})
    return request.model_copy(update={"transport": transport, "twin": twin})


class _Network:
    """Where each process runs: all on loopback, or each in its own namespace on emulated links."""

    def __init__(self, request: TrialRequest):
        self.topo: Topology | LoopbackTopology | None = None
        self.truth_socket = ""
        self.infra_node: str | None = None  # the router's or broker's own machine, if it has one
        self.capture: LinkCapture | None = None  # the robot link's capture while the trial runs
        self.wifi_roles: tuple[Role, ...] = ()  # host/robot on an emulated Wi-Fi link
        if request.network != "loopback":
            from fieldtest.netem import get_profile, open_topology
            from fieldtest.netem.placement import wireless_nodes

            extra = registry.get(request.transport.middleware).emulated_nodes()
            self.infra_node = extra[0] if extra else None
            profile = get_profile(request.network)
            wireless = wireless_nodes(request.topology, profile, self.infra_node)
            # a station of a Wi-Fi profile has a Wi-Fi interface (CycloneDDS's multicast default)
            if profile.wifi80211 is not None or profile.name.startswith("wifi"):
                self.wifi_roles = tuple(role for role in ("host", "robot") if role in wireless)
            self.topo = open_topology(
                request.network, nodes=["host", "robot", "mocap", *extra], wireless=wireless
            )

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

    def apply(self, request: TrialRequest) -> TrialRequest:
        """Addresses of the namespaces in the request, so every process finds its peers."""
        topo = self.emulated_topo
        if topo is None:
            return request
        addr = topo.address
        nodes = self.topo_nodes()
        transport = request.transport.model_copy(
            update={
                "host_address": addr("host"),
                "robot_address": addr("robot"),
                "wifi_roles": self.wifi_roles,
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
        topo = self.emulated_topo
        if topo is None:
            return {}
        return {node: info["link"] for node, info in topo.describe()["nodes"].items()}

    def topo_nodes(self) -> list[str]:
        return list(getattr(self.topo, "nodes", []) or getattr(self.topo, "links", {}).keys())

    def check_faults(self, faults: list[dict]) -> None:
        """Refuse before the trial starts a profile change its link cannot make (an 802.11 link)."""
        from fieldtest.netem import TopologyError

        topo = self.emulated_topo
        for fault in faults:
            if fault.get("kind") == "profile" and topo is not None:
                try:
                    topo.check_profile_change(fault["profile"])
                except (TopologyError, ValueError) as exc:
                    raise ProcessStartError(f"faults: {exc}") from None

    def schedule_faults(self, faults: list[dict], stream_start_ns: int) -> None:
        if not faults:
            return
        topo = self.emulated_topo
        if topo is None:
            raise ProcessStartError("link faults need an emulated network (network namespaces)")
        t0_mono = time.monotonic_ns() - (time.time_ns() - stream_start_ns)
        for fault in faults:
            if fault.get("kind") == "outage":
                topo.schedule_outage(float(fault["at_s"]), float(fault["duration_s"]), t0_ns=t0_mono)
            elif fault.get("kind") == "profile":
                topo.set_profile(fault["profile"], at_s=float(fault["at_s"]), t0_ns=t0_mono)
            else:
                raise ProcessStartError(f"unknown fault kind {fault.get('kind')!r} (outage or profile)")

    def start_capture(self, trial_dir: Path) -> str | None:
        """Capture the robot's emulated link for the trial (None), or say why not (a warning)."""
        topo = self.emulated_topo
        if topo is None:
            return None
        from fieldtest.netem.linktraffic import CAPTURE_FILE, CaptureError, LinkCapture

        # on an overlay the trial's own packets, before encapsulation (the record names the overhead)
        iface = topo.interface("robot")
        capture = self.capture = LinkCapture(self.prefix("robot"), iface, trial_dir / CAPTURE_FILE)
        try:
            capture.start()
        except CaptureError as exc:
            self.capture = None
            return f"no link traffic record: {exc}"
        return None

    def stop_capture(self, transport: TransportConfig) -> dict:
        """Packets and bytes per second by kind on the robot's link, in all and per direction
        (fieldtest.netem.wire; {} without a capture)."""
        from fieldtest.netem.linktraffic import CaptureError
        from fieldtest.netem.wire import trial_wire_record

        capture, self.capture = self.capture, None
        if capture is None or self.topo is None:
            return {}
        try:
            summary = capture.stop()
            wire = trial_wire_record(
                capture.path, self.topo.address("robot"), summary["duration_s"], transport
            )
            return {"node": "robot", **summary, **wire}
        except CaptureError as exc:
            return {"node": "robot", "error": str(exc)}

    def link_simulator(self) -> dict | None:
        """The ns-3 802.11 link's lag, CPU and frames by kind (None for other links)."""
        topo = self.emulated_topo
        return topo.simulator_record() if topo is not None else None

    def start_forwarder_record(self) -> None:
        """The userspace link forwarders count from here: the stream, not the probes before it."""
        if (topo := self.emulated_topo) is not None:
            topo.reset_link_stats()

    def link_forwarder(self) -> dict | None:
        """Each emulated node's forwarder: frames and their lateness per direction (None without)."""
        topo = self.emulated_topo
        if topo is None:
            return None
        from fieldtest.netem.forwarder import ForwarderError

        try:
            return topo.link_stats() or None
        except ForwarderError as exc:  # a forwarder that died: the trial's link record says so
            return {"error": str(exc)}

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
    if infra is None:  # the family starts none for this configuration
        yield None
        return
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
        "--invalid-prob", f"{twin.mocap_dropout:g}", "--latency-ms", f"{twin.mocap_latency_s * 1000:g}",
        "--seed", str(request.seed),
        "--source", "feed", *(["--feed-bind", twin.truth_socket] if twin.truth_socket else []),
        "--feed-port", str(twin.truth_port), "--realtime",
    ]  # fmt: skip
    record = [
        "record", str(trial_dir / MOCAP_BAG), *common, "--server", twin.natnet_address,
        "--rigid-body-id", str(request.rigid_body_id), "--status", str(trial_dir / MOCAP_STATUS_FILE),
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
        request.transport, request.cmd_type, trial_dir / "bridges", request.robot_traffic
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
    request: TrialRequest, trial_dir: Path, procs: ProcessGroup, net: _Network, stop: threading.Event | None
) -> None:
    """Bridges, forwarding probe, NatNet emulator, mocap recorder, robot, host; none after a stop
    signal (``lifecycle.start_in_order``)."""
    side_env: dict[str, str] = {}
    probing = False
    serve, record = _natnet_args(request, trial_dir)
    arg = ["--trial-dir", str(trial_dir)]

    def bridges() -> None:
        side_env.update(_start_bridges(request, trial_dir, procs, net))

    def forward_probe() -> None:
        nonlocal probing
        probing = _start_forward_probe(request, trial_dir, procs, net)

    def natnet() -> None:
        procs.start_python("natnet", "fieldtest.natnet", serve, prefix=net.prefix("mocap"))
        procs.wait_ready("natnet", marker="NatNet emulator:")

    def recorder() -> None:
        # on the ground-truth machine, wired: where the host sits must not move the truth's time stamps
        procs.start_python("recorder", "fieldtest.natnet", record, prefix=net.prefix("mocap"))
        procs.wait_ready("recorder", marker="mocap recorder:")

    def robot() -> None:
        procs.start_python("robot", "fieldtest.twin.robot", arg, side_env, prefix=net.prefix("robot"))
        procs.wait_ready("robot", timeout_s=30.0)
        if probing:
            procs.wait_ready("fwdprobe", marker=FORWARD_PROBE_READY, timeout_s=30.0)

    def host() -> None:
        procs.start_python("host", "fieldtest.twin.host", arg, side_env, prefix=net.prefix("host"))

    start_in_order((bridges, forward_probe, natnet, recorder, robot, host), stop)


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
            raise Interrupted  # a stop signal reached the main thread
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


def _mocap_progress(procs: ProcessGroup, trial_dir: Path) -> RecordingProgress:
    """The recorder process's status file; a recorder that exited is not waited for."""
    recorder = procs.procs.get("recorder")
    try:
        status = json.loads((trial_dir / MOCAP_STATUS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        status = {}
    running = recorder is not None and recorder.popen.poll() is None and status.get("running", True)
    return RecordingProgress(
        mocap_running=bool(running),
        mocap_moved_ns=status.get("moved_ns"),
        mocap_last_ns=status.get("last_valid_ns"),
    )


def _end_reason(host_code: int | None) -> tuple[EndReason, str]:
    kind = host_exit_kind(host_code)
    detail = {
        "completed": "",
        "host-killed": "the host streamer was killed (SIGKILL): no stop burst was sent",
        "host-stopped": f"the host streamer was stopped (exit {host_code}) after its stop burst",
        "error": f"the host streamer exited with code {host_code}",
    }[kind]
    return kind, detail


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


def _log_applied_faults(link: dict, net: _Network) -> None:
    """The faults as applied (each event when due and when done, monotonic ns), into the link's
    description, measured before the trial: a loaded machine may apply an outage late."""
    topo = net.emulated_topo
    if topo is not None and isinstance(link.get("description"), dict):
        link["description"]["faults"] = list(topo.fault_log)


def _finish_record(
    trial_dir: Path,
    procs: ProcessGroup,
    reason: EndReason,
    detail: str,
    link: dict,
    machine: MachineReport | None = None,
    link_simulator: dict | None = None,
    link_traffic: dict | None = None,
    link_forwarder: dict | None = None,
    notes: list[str] | None = None,
) -> None:

    def fill(record: TrialRecord) -> None:
        outcome = record.outcome
        outcome.link_traffic = link_traffic or {}
        outcome.warnings += notes or []
        if machine:
            outcome.stack["machine"] = machine
        if link_simulator:  # a simulated link that fell behind real time makes the trial invalid
            outcome.stack["link_simulator"] = link_simulator
        if link_forwarder:  # so does a forwarder that sent late (fieldtest.analysis.causes.stackfaults)
            outcome.stack["link_forwarder"] = link_forwarder
        if mocap := _mocap_stack_faults(procs):
            outcome.stack["mocap"] = mocap
        if (probe := trial_dir / FORWARD_PROBE_FILE).exists():
            outcome.stack["forwarding"] = json.loads(probe.read_text())
        outcome.link = link
        outcome.faults = _fault_records(record.request.faults, outcome.stream_start_ns)
        if realtime := procs.realtime():  # routers, brokers, bridges: did each run at SCHED_FIFO
            outcome.stack["realtime"] = realtime

    finish_record(trial_dir, reason, detail, procs.cpu(), fill)


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
    topo = net.emulated_topo
    if topo is None:
        return (
            {"profile": "loopback"}
            if net.topo is None
            else {"profile": "loopback", "note": net.topo.describe()}
        )
    from fieldtest.netem import measure_link

    measured = measure_link(topo, "host", "robot", count=50)
    if net.infra_node is not None:  # the host's path to the router/broker machine, by topology
        to_infra = measure_link(topo, "host", net.infra_node, count=50)
        measured[f"host_to_{net.infra_node}"] = {k: v for k, v in to_infra.items() if k.startswith(LINK_KEYS)}
    return {"description": topo.describe(), **measured}


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
    record = open_record(trial_dir, request)
    record.outcome.clocks = "shared"  # every twin process reads this machine's clock, namespaces or not
    record.outcome.nodes = net.placement()
    if net.topo is not None and not net.emulated:
        record.outcome.warnings.append(f"network {request.network!r} not emulated here: ran on loopback")
    _record_dds_discovery(request, record)
    write_trial(trial_dir, record)
    procs = ProcessGroup(trial_dir / "logs")
    reason: EndReason = "error"
    detail, link = "", {}
    notes: list[str] = []
    monitor = MachineMonitor()  # the machine's own disturbance over the trial (steal, pressure, wake-ups)
    try:
        net.check_faults(request.faults)
        link = _measure_link(net)
        if warning := net.start_capture(trial_dir):  # after the probes, so they stay out of it
            record.outcome.warnings.append(warning)
            write_trial(trial_dir, record)
        with _infrastructure(request, trial_dir, net) as infra:
            try:
                infra_name = registry.get(request.transport.middleware).infra_process
                if infra is not None and infra_name is not None and infra.proc is not None:  # started
                    procs.watch(infra_name, infra.proc, realtime=infra.realtime)
                _start_trial_processes(request, trial_dir, procs, net, stop)
                monitor.start()
                net.start_forwarder_record()
                _wait_for_host(procs, request, net, progress, kill_host_at_s, stop)
                monitor.stop()  # the window ends with the stream: shutdown work is not the trial's
                host_ended = time.monotonic()
                reason, detail = _end_reason(procs.procs["host"].popen.returncode)
                if reason == "completed":
                    recorded = functools.partial(_mocap_progress, procs, trial_dir)
                    if note := record_rest_after_run(recorded, request.plan, _stream_start_ns(procs), stop):
                        notes.append(note)
                time.sleep(max(0.0, host_ended + STOP_GRACE_S - time.monotonic()))
            finally:
                # On every path, and before the router or broker goes: the host first, so that its
                # stop burst still reaches a listening robot through them.
                procs.stop_all(order=STOP_ORDER)
    except ProcessStartError as exc:
        reason, detail = "error", str(exc)
    except (Interrupted, KeyboardInterrupt):
        reason, detail = "interrupted", interruption(stop)
    finally:
        procs.stop_all(order=STOP_ORDER)  # nothing left to stop unless the router or broker failed
        machine = monitor.stop() if monitor.started else None
        traffic = net.stop_capture(request.transport)
        forwarder = net.link_forwarder()
        _log_applied_faults(link, net)
        _finish_record(
            trial_dir, procs, reason, detail, link, machine, net.link_simulator(), traffic, forwarder, notes
        )
    return TrialResult(trial_dir, reason, detail)


def _record_dds_discovery(request: TrialRequest, record: TrialRecord) -> None:
    """DDS cases: the discovery the participants run, and a warning where loopback forced unicast;
    each side's DDS library, and a warning where they differ."""
    from fieldtest.middleware.dds.settings import (
        DDS_VENDORS,
        MIXED_VENDORS_WARNING,
        discovery_used,
        side_middleware,
    )
    from fieldtest.middleware.dds.settings import Settings as DdsSettings

    transport = request.transport
    dds = transport.own_settings(DdsSettings)
    if dds is None:
        return
    used = record.outcome.dds_discovery = discovery_used(transport, "robot")
    vendors = record.outcome.dds_vendors = {
        role: DDS_VENDORS[side_middleware(transport, role)] for role in ("host", "robot")
    }
    if vendors["host"] != vendors["robot"]:
        record.outcome.warnings.append(MIXED_VENDORS_WARNING.format(**vendors))
    if used == "none" != dds.discovery:
        record.outcome.warnings.append(
            f"transport.dds.discovery {dds.discovery!r}: loopback has no multicast, "
            "so the participants discovered by unicast peers (none)"
        )
