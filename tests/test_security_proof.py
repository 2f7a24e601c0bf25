"""Proof that every secured twin configuration holds: rogues, packet capture, missing and expired keys.

Each scenario is a twin trial on this machine: the real twin robot process (``fieldtest.twin.robot``)
and the real twin host process (``fieldtest.twin.host``) join the link from trial.yaml alone, with
the keystore ``prepare_trial_security`` made for the trial, plus the router or broker the middleware
needs. While the host drives, rogue processes (tests/security_rogue.py) join the same link and both
publish and subscribe /cmd_vel:

- ``no-credentials``: security off altogether;
- ``foreign-ca``: the host's name under another CA (DDS: a second keystore whose permissions grant
  it every link topic both ways; TLS: ``create_rogue_tls``);
- ``no-permission``: trusted CA, but permissions without /cmd_vel (DDS: the mocap enclave; TLS: a
  certificate for /fieldtest/mocap, which the ACLs do not name);
- ``expired``: trusted CA, the host's own name, certificate expired.

The robot's bag is the count of accepted commands (one CommandReceipt per applied command), so the
test asserts zero receipts from rogue seq numbers and zero host commands at any rogue, next to the
positive controls: every host command reaches the robot, and with security "none" the same rogue
does get its commands applied (and, where the topology lets a third party subscribe, receives the
host's). tcpdump records the trial's ports meanwhile; the host's speed is a marker double whose 8
bytes must be in the capture without encryption and absent with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from fieldtest.catalog import family
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.registry import prepare_trial_security
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.names import HOST_ENCLAVE, MOCAP_ENCLAVE, STOP_BURST_COUNT
from fieldtest.plan import SquarePlan
from fieldtest.procs import free_port, lease_dds_domain
from fieldtest.record import RECEIPTS_TOPIC, ROBOT_BAG, TrialRecord, TrialRequest, read_bag, write_trial
from fieldtest.security.keystore import (
    KeystoreOptions,
    Validity,
    create_keystore,
    create_rogue_tls,
    issue_tls_set,
    load_cert,
    load_key,
)
from fieldtest.security.policy import LINK_TOPICS, EnclaveSpec
from fieldtest.security.securitysettings import SECURITY_SETTINGS
from fieldtest.testkit import needs
from fieldtest.transport import TransportConfig


@pytest.fixture(autouse=True)
def _installed_tools():
    needs.tools("tcpdump", "mosquitto")


ROGUE_SCRIPT = Path(__file__).with_name("security_rogue.py")
# The host's forward speed is the marker: 8 bytes unlikely to occur in any other traffic.
MARKER_SPEED = 0.1234567890123456
MARKER = struct.pack("<d", MARKER_SPEED)
PROOF_PLAN = SquarePlan(
    linear_speed_mps=MARKER_SPEED,
    turn_rate_dps=180.0,
    side_duration_s=0.3,
    laps=1,
    command_rate_hz=50.0,
    start_delay_s=0.0,
)
HOST_COMMANDS = PROOF_PLAN.n_ticks() + STOP_BURST_COUNT  # seq 0 .. n_ticks + burst - 1
ROGUE_SEQ_BASE = 1_000_000
NAMESPACE = f"/proof{os.getpid() % 10_000}"
ALL_ROGUES = ("no-credentials", "foreign-ca", "no-permission", "expired")
# Whether a setting hides the command payload on the wire (rtps-sign signs but does not encrypt).
ENCRYPTS_PAYLOAD = {
    "none": False,
    "sros2": True,
    "rtps-sign": False,
    "rtps-encrypt": True,
    "origin-auth-encrypt": True,
    "submessage-encrypt": True,
    "sign-submessage-encrypt": True,
    "sign-submessage-origin-encrypt-data": True,
    "plugins-only": False,  # participants authenticate, nothing protected
    "plugins-only-ac": False,
    "mtls-acl": True,
}
PROCESS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Scenario:
    middleware: str
    security: str
    rogues: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.middleware}-{self.security}"

    @property
    def secured(self) -> bool:
        return self.security != "none"


SCENARIOS = (
    Scenario("dds", "none", ("no-credentials",)),
    Scenario("dds", "sros2", ALL_ROGUES),
    Scenario("dds", "rtps-sign", ("no-credentials",)),
    Scenario("dds", "rtps-encrypt", ("no-credentials",)),
    Scenario("dds", "origin-auth-encrypt", ("no-credentials",)),
    Scenario("dds", "submessage-encrypt", ("no-credentials",)),
    Scenario("dds", "sign-submessage-encrypt", ("no-credentials",)),
    Scenario("dds", "sign-submessage-origin-encrypt-data", ("no-credentials",)),
    Scenario("dds", "plugins-only", ("no-credentials",)),
    Scenario("dds", "plugins-only-ac", ("no-credentials",)),
    # Fast DDS: Debian's libfastrtps 2.9 with its builtin plugins (PKI-DH, Access-Permissions, AES-GCM-GMAC)
    Scenario("fastdds", "none", ("no-credentials",)),
    Scenario("fastdds", "sros2", ALL_ROGUES),
    Scenario("fastdds", "rtps-sign", ("no-credentials",)),
    Scenario("zenoh-peer", "none", ("no-credentials",)),
    Scenario("zenoh-peer", "mtls-acl", ALL_ROGUES),
    Scenario("zenoh-router", "none", ("no-credentials",)),
    Scenario("zenoh-router", "mtls-acl", ALL_ROGUES),
    Scenario("mqtt-local-broker", "none", ("no-credentials",)),
    Scenario("mqtt-local-broker", "mtls-acl", ALL_ROGUES),
)
# DDS scenarios use DOMAIN_BASE + i (ports 7400 + 250 * id): a block of domains this test process
# leases until it exits, so a parallel run on this machine (another test worker, a demo) never shares one.
# The blocks stay below the kernel's ephemeral ports: a DDS participant's own sockets (another
# scenario's, another test's) take ports there, and one inside a captured block would put another
# domain's plain packets into this scenario's capture (a plain marker was seen in an sros2 capture).
EPHEMERAL_LOW = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
HIGHEST_CAPTURED_DOMAIN = (EPHEMERAL_LOW - 7400) // 250 - 1  # its block ends below EPHEMERAL_LOW
DOMAIN_LEASE = lease_dds_domain(20 + (os.getpid() % 7) * 8, offsets=tuple(range(len(SCENARIOS))))
DOMAIN_BASE = DOMAIN_LEASE.domain_id


@dataclass
class ScenarioResult:
    scenario: Scenario
    robot_seqs: list[int] = field(default_factory=list)
    host_exit: int | None = None
    rogues: list[dict[str, Any]] = field(default_factory=list)
    capture_packets: int = 0
    marker_in_capture: bool = False
    error: str = ""
    logs: dict[str, str] = field(default_factory=dict)

    def host_seqs(self) -> set[int]:
        return {s for s in self.robot_seqs if s < ROGUE_SEQ_BASE}

    def rogue_accepted(self) -> list[int]:
        return [s for s in self.robot_seqs if s >= HOST_COMMANDS]

    def diagnostics(self) -> str:
        tails = {name: text[-1500:] for name, text in self.logs.items()}
        return json.dumps({"error": self.error, "rogues": self.rogues, "logs": tails}, indent=1)


# ---------------------------------------------------------------- processes


class LoggedProcess:
    """A child process writing stdout+stderr to a log file (no pipe to fill), stdin optional."""

    def __init__(self, name: str, argv: list[str], log_path: Path, stdin: bool = False):
        self.name = name
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            self.popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, marker: str, timeout_s: float = PROCESS_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.text():
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.popen.returncode}) before {marker!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {marker!r} within {timeout_s:g} s")
            time.sleep(0.05)

    def send(self, line: str) -> None:
        if self.popen.stdin is not None and self.popen.poll() is None:
            self.popen.stdin.write(line + "\n")
            self.popen.stdin.flush()

    def wait(self, timeout_s: float = PROCESS_TIMEOUT_S) -> int | None:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal, then kill after a grace period; always reaped."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            if self.wait(10.0) is None:
                self.popen.kill()
                self.popen.wait()
        if self.popen.stdin is not None:
            self.popen.stdin.close()


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@contextlib.contextmanager
def running(proc: LoggedProcess, sig: int = signal.SIGTERM):
    try:
        yield proc
    finally:
        proc.stop(sig)


def capture_filter(config: TransportConfig) -> list[str]:
    """The trial's own ports: DDS domain's port block (7400 + 250 * id, 250 ports), else the TCP port."""
    if family(config.middleware) == "dds":
        base = 7400 + 250 * config.domain_id
        return ["udp", "portrange", f"{base}-{base + 249}"]
    port = (
        config.settings(ZenohSettings).port
        if config.middleware.startswith("zenoh")
        else config.settings(MqttSettings).port
    )
    return ["tcp", "port", str(port)]


@contextlib.contextmanager
def packet_capture(pcap: Path, config: TransportConfig):
    argv = ["tcpdump", "-i", "lo", "-U", "-s", "0", "-n", "-w", str(pcap), *capture_filter(config)]
    proc = LoggedProcess("tcpdump", argv, pcap.with_suffix(".log"))
    with running(proc, signal.SIGINT):
        proc.wait_for("listening on", timeout_s=15.0)
        yield proc


def pcap_packets(data: bytes) -> int:
    """Number of packets in a classic pcap file (24-byte header, 16-byte record headers)."""
    count, offset = 0, 24
    while offset + 16 <= len(data):
        captured = struct.unpack_from("<I", data, offset + 8)[0]
        offset += 16 + captured
        count += 1
    return count


@contextlib.contextmanager
def infrastructure(config: TransportConfig, work: Path):
    """The router or broker, configured by the registry from the config alone."""
    from fieldtest.middleware import registry

    process = registry.infrastructure(config, work)
    if process is None:
        yield
        return
    process.start_timeout_s = 30.0
    with process:
        yield


# ---------------------------------------------------------------- rogue credentials


def _past_validity() -> Validity:
    now = dt.datetime.now(dt.timezone.utc)
    return Validity(now - dt.timedelta(days=30), now - dt.timedelta(days=1))


def _copy_ca(keystore: Path, target: Path) -> None:
    for sub in ("public", "private"):
        shutil.copytree(keystore / sub, target / sub, symlinks=True)


def rogue_material(variant: str, config: TransportConfig, work: Path) -> dict[str, Any]:
    """What the rogue of ``variant`` joins with (see the module docstring)."""
    keystore = Path(config.keystore)
    spec: dict[str, Any] = {"variant": variant}
    if variant == "no-credentials":
        return spec
    options = KeystoreOptions(domain_id=config.domain_id, namespace=config.namespace)
    ca_cert, ca_key = load_cert(keystore / "tls" / "ca.pem"), load_key(keystore / "private" / "ca.key.pem")
    trusted_ca = str(keystore / "tls" / "ca.pem")
    if family(config.middleware) == "dds":
        if variant == "foreign-ca":  # its own CA, so it grants itself every link topic both ways
            forged = EnclaveSpec(
                HOST_ENCLAVE, "host", "forged host", publish=LINK_TOPICS, subscribe=LINK_TOPICS
            )
            foreign = create_keystore(work / "foreign", replace(options, enclaves=(forged,)))
            spec.update(keystore=str(foreign), enclave=HOST_ENCLAVE)
        elif variant == "no-permission":
            spec.update(keystore=str(keystore), enclave=MOCAP_ENCLAVE)
        else:  # expired: the trusted CA signs an expired identity for the host's enclave
            _copy_ca(keystore, work / "expired")
            expired_options = KeystoreOptions(
                domain_id=config.domain_id, namespace=config.namespace, validity=_past_validity()
            )
            spec.update(
                keystore=str(create_keystore(work / "expired", expired_options)), enclave=HOST_ENCLAVE
            )
        return spec
    if variant == "foreign-ca":
        files = create_rogue_tls(work / "foreign-tls")["host"]
    elif variant == "no-permission":
        identities = {"mocap": MOCAP_ENCLAVE}
        files = issue_tls_set(work / "mocap-tls", ca_cert, ca_key, identities=identities)["mocap"]
    else:
        identities = {"host": HOST_ENCLAVE}
        files = issue_tls_set(
            work / "expired-tls", ca_cert, ca_key, validity=_past_validity(), identities=identities
        )["host"]
    spec["tls"] = {"ca": trusted_ca, "cert": str(files.cert), "key": str(files.key)}
    return spec


def start_rogues(scenario: Scenario, config: TransportConfig, work: Path) -> list[LoggedProcess]:
    specs = [rogue_material(v, config, work) for v in scenario.rogues]
    # A DDS process holds one identity; Zenoh/MQTT rogues each get their own session in one process.
    groups = [[s] for s in specs] if family(config.middleware) == "dds" else [specs]
    procs = []
    for i, group in enumerate(groups):
        spec = {"transport": config.model_dump(), "seq_base": ROGUE_SEQ_BASE * (i + 1), "rogues": group}
        argv = [sys.executable, str(ROGUE_SCRIPT), json.dumps(spec)]
        procs.append(LoggedProcess(f"rogue{i}", argv, work / "logs" / f"rogue{i}.log", stdin=True))
    return procs


def rogue_reports(proc: LoggedProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.text().splitlines() if line.startswith("{")]


# ---------------------------------------------------------------- one scenario


def trial_request(scenario: Scenario, index: int) -> TrialRequest:
    transport = TransportConfig(
        middleware=scenario.middleware,
        security=scenario.security,
        namespace=NAMESPACE,
        domain_id=DOMAIN_BASE + index,
        zenoh_port=free_port(),
        mqtt_port=free_port(),
    )
    return TrialRequest(name=scenario.id, plan=PROOF_PLAN, transport=transport, seed=index)


def robot_took_every_command(work: Path, robot: LoggedProcess, timeout_s: float = 15.0) -> bool:
    """Until the robot's bag (read while it records) holds every command the host sends; False at
    the timeout or once the robot ended, for the assertions to say what is missing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and robot.popen.poll() is None:
        receipts = read_bag(work / ROBOT_BAG, topics={RECEIPTS_TOPIC}).messages(RECEIPTS_TOPIC)
        if {int(msg.seq) for _, msg in receipts} >= set(range(HOST_COMMANDS)):
            return True
        time.sleep(0.1)
    return False


def run_scenario(scenario: Scenario, index: int, base: Path) -> ScenarioResult:
    result = ScenarioResult(scenario)
    work = base / scenario.id
    request = prepare_trial_security(trial_request(scenario, index), work)
    write_trial(work, TrialRecord(trial_id=scenario.id, request=request))
    config = request.transport
    trial_arg = ["--trial-dir", str(work)]
    procs: list[LoggedProcess] = []
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(infrastructure(config, work))
            stack.enter_context(packet_capture(work / "link.pcap", config))
            robot = LoggedProcess(
                "robot", python_module("fieldtest.twin.robot", *trial_arg), work / "logs/robot.log"
            )
            procs.append(robot)
            stack.enter_context(running(robot))
            robot.wait_for("READY")
            rogues = start_rogues(scenario, config, work)
            procs += rogues
            for rogue in rogues:
                stack.enter_context(running(rogue))
            for rogue in rogues:
                rogue.wait_for("ROGUE READY")
            host = LoggedProcess(
                "host", python_module("fieldtest.twin.host", *trial_arg), work / "logs/host.log"
            )
            procs.append(host)
            stack.enter_context(running(host))
            result.host_exit = host.wait()
            robot_took_every_command(work, robot)  # the rogues keep listening until the host's last is in
            for rogue in rogues:
                rogue.send("STOP")
            for rogue in rogues:
                rogue.wait(20.0)
                result.rogues += rogue_reports(rogue)
            robot.stop()
        receipts = read_bag(work / ROBOT_BAG).messages(RECEIPTS_TOPIC)
        result.robot_seqs = [int(msg.seq) for _, msg in receipts]
        data = (work / "link.pcap").read_bytes()
        result.capture_packets = pcap_packets(data)
        result.marker_in_capture = MARKER in data
    except Exception as exc:  # reported by the assertions with the logs
        result.error = f"{type(exc).__name__}: {exc}"
    result.logs = {p.name: p.text() for p in procs if p.log_path.exists()}
    return result


@pytest.fixture(scope="module")
def proof(tmp_path_factory) -> dict[str, ScenarioResult]:
    """Every scenario, three at a time (each on its own ports and DDS domain)."""
    if DOMAIN_BASE + len(SCENARIOS) - 1 > HIGHEST_CAPTURED_DOMAIN:
        pytest.fail(
            f"DDS domains {DOMAIN_BASE}..{DOMAIN_BASE + len(SCENARIOS) - 1} leased: their ports reach the "
            f"ephemeral ports from {EPHEMERAL_LOW}, where other participants' sockets would enter the capture",
            pytrace=False,
        )
    base = tmp_path_factory.mktemp("proof")
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {s.id: pool.submit(run_scenario, s, i, base) for i, s in enumerate(SCENARIOS)}
        return {sid: f.result() for sid, f in futures.items()}


def test_every_security_setting_is_proven():
    assert {s.security for s in SCENARIOS} == set(SECURITY_SETTINGS) == set(ENCRYPTS_PAYLOAD)


SECURED = [s for s in SCENARIOS if s.secured]
CONTROLS = [s for s in SCENARIOS if not s.secured]


def _ran(result: ScenarioResult) -> None:
    assert not result.error, result.diagnostics()
    assert result.host_exit == 0, result.diagnostics()
    # Positive control: the legitimate host's every command was applied by the robot.
    assert result.host_seqs() == set(range(HOST_COMMANDS)), result.diagnostics()
    assert {r["variant"] for r in result.rogues} == set(result.scenario.rogues), result.diagnostics()


@pytest.mark.parametrize("scenario", SECURED, ids=lambda s: s.id)
def test_no_rogue_command_is_accepted_or_received(proof, scenario):
    result = proof[scenario.id]
    _ran(result)
    assert result.rogue_accepted() == [], result.diagnostics()
    for rogue in result.rogues:
        assert rogue["received_others"] == 0, rogue
        # It really tried: refused at the door, refused a publisher, or sent commands into the void.
        assert not rogue["joined"] or not rogue["publisher"] or rogue["sent"] > 0, rogue


@pytest.mark.parametrize("scenario", CONTROLS, ids=lambda s: s.id)
def test_without_security_the_same_rogue_succeeds(proof, scenario):
    """The control that shows the test above can fail: nothing stops the rogue when security is off."""
    result = proof[scenario.id]
    _ran(result)
    (rogue,) = result.rogues
    assert rogue["joined"] and rogue["sent"] > 0, rogue
    assert result.rogue_accepted(), "the robot applied no rogue command with security off"
    if scenario.middleware != "zenoh-peer":  # a Zenoh peer does not forward to a third peer
        assert rogue["received_others"] > 0, rogue


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_marker_visible_in_capture_only_without_encryption(proof, scenario):
    result = proof[scenario.id]
    _ran(result)
    assert result.capture_packets > HOST_COMMANDS // 2, f"capture saw {result.capture_packets} packets"
    expected = not ENCRYPTS_PAYLOAD[scenario.security]
    assert result.marker_in_capture == expected, (
        f"{scenario.id}: marker {'absent' if expected else 'present'} in {result.capture_packets} packets"
    )


# ---------------------------------------------------------------- keys missing or expired

SECURED_MIDDLEWARES = (
    ("dds", "sros2"),
    ("zenoh-peer", "mtls-acl"),
    ("mqtt-local-broker", "mtls-acl"),
    ("fastdds", "sros2"),
)


def _robot_refuses(trial_dir: Path) -> tuple[int | None, str]:
    proc = LoggedProcess(
        "robot", python_module("fieldtest.twin.robot", "--trial-dir", str(trial_dir)), trial_dir / "robot.log"
    )
    with running(proc):
        code = proc.wait(PROCESS_TIMEOUT_S)
    return code, proc.text()


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize(("middleware", "security"), SECURED_MIDDLEWARES)
def test_robot_with_missing_key_refuses_to_start(tmp_path, middleware, security):
    request = TrialRequest(
        plan=PROOF_PLAN,
        transport=TransportConfig(
            middleware=middleware, security=security, zenoh_port=free_port(), mqtt_port=free_port()
        ),
    )
    request = prepare_trial_security(request, tmp_path)
    write_trial(tmp_path, TrialRecord(trial_id="missing-key", request=request))
    keystore = Path(request.transport.keystore)
    key = keystore / ("enclaves/fieldtest/robot/key.pem" if family(middleware) == "dds" else "tls/robot.key")
    key.unlink()  # the robot's copy of the keystore lacks its private key
    code, output = _robot_refuses(tmp_path)
    assert code not in (0, None), output[-2000:]
    assert "READY" not in output
    assert f"{key}: missing" in _last_line(output), output[-2000:]


@pytest.mark.parametrize(("middleware", "security"), SECURED_MIDDLEWARES)
def test_robot_with_expired_certificate_refuses_to_start(tmp_path, middleware, security):
    config = TransportConfig(
        middleware=middleware, security=security, zenoh_port=free_port(), mqtt_port=free_port()
    )
    keystore = create_keystore(tmp_path / "keystore", KeystoreOptions(validity=_past_validity()))
    request = TrialRequest(plan=PROOF_PLAN, transport=config.model_copy(update={"keystore": str(keystore)}))
    write_trial(tmp_path, TrialRecord(trial_id="expired", request=request))
    code, output = _robot_refuses(tmp_path)
    cert = keystore / (
        "enclaves/fieldtest/robot/cert.pem" if family(middleware) == "dds" else "tls/robot.crt"
    )
    assert code not in (0, None), output[-2000:]
    assert "READY" not in output
    assert f"{cert}: certificate expired on" in _last_line(output), output[-2000:]
