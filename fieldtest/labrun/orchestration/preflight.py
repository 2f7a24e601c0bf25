"""Pre-flight checks of a lab trial: each takes what the runner can observe and says go or no-go.

- robot link: the robot's clock probes reach the host (host status) and the host's replies reach
  the robot (robot status) over the trial's own middleware: both directions of the link work; and
  the robot's command subscription has matched a publisher, where one exists before the first
  command (on a loaded machine it can match seconds after the host's publisher saw it);
- clock: the robot's minimum-delay offset estimate of host - robot and its round trip are small
  (chrony between host and Pi working) - latencies are corrected anyway, but a large offset means
  time sync is broken and the round trip shows a slow link before the robot moves;
- mocap: the recorder receives frames at a sane rate with the rigid body tracked;
- keystore: for a secure trial, the keystore checks out, holds the enclaves/TLS identities the
  trial uses, stays valid through the trial, and TLS certificates name the addresses the peers dial;
- base: the robot's Create 3 pre-flight report (speed cap, reflexes, watchdog, battery); while that
  gate runs, the robot's nodes have not started, and a pre-flight that ends then names the gate.

``summarize`` turns failures of checks listed in ``warn_only`` into warnings.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fieldtest.catalog import catalog_entry
from fieldtest.linkconfig import Role
from fieldtest.names import ROLE_ENCLAVES
from fieldtest.record import TrialRequest
from fieldtest.record.recordnames import CMD_VEL_TOPIC, RELAY_CMD_VEL_TOPIC

if TYPE_CHECKING:
    from fieldtest.security.machineshare import MachineShare

Severity = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class CheckResult:
    check: str
    severity: Severity
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    @property
    def ok(self) -> bool:
        return self.severity != "fail"


def check_robot_link(
    host: dict[str, Any] | None,
    robot: dict[str, Any] | None,
    max_age_s: float = 2.0,
    command_publisher_expected: bool = True,
) -> CheckResult:
    """Both directions of the link carry the probes, and the robot's command subscription has
    matched a publisher where one exists before the first command (``command_publisher_expected``):
    a command sent before that match is lost, as no writer resends what came before it."""
    if host is None:
        return CheckResult("robot-link", "fail", "no host status yet (is the host side running?)")
    age = host.get("last_probe_age_s")
    if not host.get("probes_answered") or age is None:
        return CheckResult("robot-link", "fail", "no clock probe from the robot has reached the host")
    if age > max_age_s:
        return CheckResult("robot-link", "fail", f"the robot's last clock probe arrived {age:.1f} s ago")
    if robot is None:
        return CheckResult("robot-link", "fail", "no robot status (is the robot side running? ssh works?)")
    if not robot.get("probes_completed"):
        return CheckResult("robot-link", "fail", "the host's probe replies do not reach the robot")
    probes = (
        f"probes both ways: {host['probes_answered']} answered by the host, "
        f"{robot['probes_completed']} completed on the robot"
    )
    publishers = robot.get("command_publishers")
    if not command_publisher_expected:
        return CheckResult(
            "robot-link", "ok", f"{probes}; the commands' publisher comes with the first command"
        )
    if publishers is None:  # a link monitor that cannot tell (its rclpy, or a robot side without the count)
        return CheckResult("robot-link", "ok", f"{probes}; command subscription's match not observable")
    if publishers < 1:
        return CheckResult(
            "robot-link",
            "fail",
            "the robot's link monitor has not matched a publisher of the commands yet (commands sent "
            "now would be lost)",
        )
    return CheckResult("robot-link", "ok", f"{probes}; command subscription matched")


def check_clock(robot: dict[str, Any] | None, max_offset_ms: float, max_round_trip_ms: float) -> CheckResult:
    if robot is None or robot.get("clock_offset_s") is None:
        return CheckResult("clock", "fail", "no clock-offset estimate from the robot yet")
    offset_ms = 1000.0 * float(robot["clock_offset_s"])
    rtt_ms = 1000.0 * float(robot.get("clock_round_trip_s") or 0.0)
    source = robot.get("clock_offset_source", "link")
    text = f"host - robot = {offset_ms:+.2f} ms (round trip {rtt_ms:.2f} ms, probes over {source})"
    if abs(offset_ms) > max_offset_ms:
        return CheckResult(
            "clock", "fail", f"{text} exceeds {max_offset_ms:g} ms: check chrony on host and Pi"
        )
    if rtt_ms > max_round_trip_ms:
        return CheckResult(
            "clock", "fail", f"{text}: round trip above {max_round_trip_ms:g} ms, link too slow"
        )
    return CheckResult("clock", "ok", text)


@dataclass(frozen=True)
class MocapSnapshot:
    frames: int
    valid: int
    mono_s: float


def check_mocap(
    before: MocapSnapshot | None,
    after: MocapSnapshot | None,
    rigid_body_id: int,
    min_valid_fraction: float,
    min_rate_hz: float = 30.0,
) -> CheckResult:
    if before is None or after is None:
        return CheckResult("mocap", "fail", "no mocap recorder (give --natnet-server, or warn_only: [mocap])")
    seconds = max(after.mono_s - before.mono_s, 1e-6)
    frames = after.frames - before.frames
    valid = after.valid - before.valid
    rate = frames / seconds
    if frames <= 0:
        return CheckResult(
            "mocap", "fail", "no NatNet frames: Motive streaming on? same network/multicast group?"
        )
    if rate < min_rate_hz:
        return CheckResult("mocap", "fail", f"{rate:.0f} frames/s < {min_rate_hz:g}: frames are being lost")
    fraction = valid / frames
    if fraction < min_valid_fraction:
        return CheckResult(
            "mocap",
            "fail",
            f"rigid body {rigid_body_id} tracked in {100 * fraction:.0f} % of frames "
            f"(< {100 * min_valid_fraction:.0f} %): markers visible? streaming id right?",
        )
    return CheckResult(
        "mocap", "ok", f"{rate:.0f} frames/s, rigid body {rigid_body_id} tracked in {100 * fraction:.0f} %"
    )


def _san_names(cert_path: Path) -> set[str]:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return names | set(san.get_values_for_type(x509.DNSName))


def _not_after(cert_path: Path) -> dt.datetime:
    from fieldtest.security.keystore import load_cert, validity_utc

    return validity_utc(load_cert(cert_path))[1]


def dialled_identities(request: TrialRequest) -> dict[str, str]:
    """TLS identity -> the address the other side dials (its certificate must name it)."""
    t = request.transport
    listener = catalog_entry(t.middleware).listener
    return {listener[0]: getattr(t, listener[1])} if listener else {}


def _is_unspecified(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_unspecified
    except ValueError:
        return False


def _shown(namespace: str) -> str:
    return namespace or '""'


def _fix_hint(keys_namespace: str | None, namespace: str, domain_id: int) -> str:
    """How to make keystore and trial agree: new keys for the trial, or the trial the keys'."""
    hint = f"recreate it with `fieldtest keys create --namespace {_shown(namespace)} --domain-id {domain_id}`"
    if keys_namespace is not None and keys_namespace != namespace:
        hint += f" or run the trial with namespace {_shown(keys_namespace)}"
    return hint


def _keystore_namespace(rules: list) -> str | None:
    """The robot namespace a kit keystore was made for, read off the host's cmd_vel grant."""
    for rule in rules:
        for topic in rule.publish:
            if topic.startswith("rt/") and topic.endswith(CMD_VEL_TOPIC) and RELAY_CMD_VEL_TOPIC not in topic:
                return topic[2 : -len(CMD_VEL_TOPIC)]
    return None


def dds_grant_problem(request: TrialRequest, roles: tuple[str, ...] = ("host", "robot")) -> str:
    """Under ROS_SECURITY_STRATEGY=Enforce, a participant outside its governance's domains is not
    created and a topic its permissions do not grant is denied (real CycloneDDS does both:
    tests/test_lab_keystore_grants.py). Checks the trial's domain against the active governance and
    each link topic, under the trial's namespace, against the host's and robot's signed permissions."""
    from fieldtest.security.keystore import enclave_allow_rules, signed_governance_domains
    from fieldtest.security.policy import LINK_FLOWS, trial_topic
    from fieldtest.security.securitysettings import governance_path

    t = request.transport
    ns, domain = "/" + t.namespace.strip("/") if t.namespace.strip("/") else "", t.domain_id
    governance = governance_path(t.keystore, roles[0], t.security)
    covered = signed_governance_domains(governance, t.keystore)
    if domain not in covered:
        return (
            f"{governance}: covers domain {sorted(covered)}, not the trial's domain_id {domain}: "
            f"no participant would start; {_fix_hint(None, ns, domain)}"
        )
    for role in roles:
        signed, rules = enclave_allow_rules(t.keystore, ROLE_ENCLAVES[role])
        for topic, sender, receiver in LINK_FLOWS:
            if role not in (sender, receiver):
                continue
            action = "publish" if role == sender else "subscribe"
            name = "rt" + trial_topic(ns, topic)
            if not any(rule.allows(action, name, domain) for rule in rules):
                keys_ns = _keystore_namespace(rules) if role == "host" else None
                made_for = f" (made for namespace {_shown(keys_ns)})" if keys_ns is not None else ""
                return (
                    f"{signed}: grants the {role} no {action} of {name} in domain {domain}{made_for}, "
                    f"so Enforce would deny the trial (namespace {_shown(ns)}); {_fix_hint(keys_ns, ns, domain)}"
                )
    return ""


def _keystore_share(keystore: str) -> MachineShare | None:
    """The machine's share a keystore is (``fieldtest keys export``), None for a whole keystore."""
    from fieldtest.security.machineshare import keystore_machine, machine_share

    machine = keystore_machine(keystore)
    return None if machine is None else machine_share(machine)


def check_keystore(
    request: TrialRequest, *, trial_length_s: float = 0.0, now: dt.datetime | None = None
) -> CheckResult:
    t = request.transport
    if t.security == "none":
        return CheckResult("keystore", "ok", "security off: no keystore needed")
    from fieldtest.middleware import registry
    from fieldtest.middleware.dds.security import dds_security_files
    from fieldtest.security.keystore import KeystoreError, tls_files
    from fieldtest.security.machineshare import check_keystore as keystore_problems
    from fieldtest.security.securitysettings import SecuritySettingError

    now = now or dt.datetime.now(dt.timezone.utc)
    if not t.keystore:
        return CheckResult("keystore", "fail", f"security {t.security!r} but no keystore path in the trial")
    t = t.model_copy(update={"keystore": str(Path(t.keystore).expanduser())})
    request = request.model_copy(update={"transport": t})
    try:
        setting = registry.get(t.middleware).security_setting(t.security)
    except SecuritySettingError as exc:
        return CheckResult("keystore", "fail", str(exc))
    problems = keystore_problems(t.keystore, now=now)
    if problems:
        return CheckResult(
            "keystore",
            "fail",
            f"{problems[0]} (+{len(problems) - 1} more)" if len(problems) > 1 else problems[0],
        )
    share = _keystore_share(t.keystore)  # a machine's share holds its own identities only
    end = now + dt.timedelta(seconds=trial_length_s + 3600)  # valid through the trial and the hour after
    try:
        if setting.governance is not None:  # DDS Security
            roles = tuple(r for r in ("host", "robot") if share is None or ROLE_ENCLAVES[r] in share.enclaves)
            for role in roles:
                certificate = dds_security_files(t.keystore, role, t.security).certificate
                if _not_after(certificate) < end:
                    return CheckResult("keystore", "fail", f"{certificate}: expires before the trial ends")
            problem = dds_grant_problem(request, roles) if roles else ""
            if problem:
                return CheckResult("keystore", "fail", problem)
        else:
            for role in ("host", "robot", *dialled_identities(request)):
                if share is not None and role not in share.tls:
                    continue
                cert = tls_files(t.keystore, role).cert
                if not cert.is_file():
                    return CheckResult("keystore", "fail", f"{cert}: missing (fieldtest keys tls)")
                if _not_after(cert) < end:
                    return CheckResult("keystore", "fail", f"{cert}: expires before the trial ends")
            for role, address in dialled_identities(request).items():
                if share is not None and role not in share.tls:
                    continue
                names = _san_names(tls_files(t.keystore, role).cert)
                if not _is_unspecified(address) and address not in names:
                    return CheckResult(
                        "keystore",
                        "fail",
                        f"{tls_files(t.keystore, role).cert}: does not name {address} (names: {', '.join(sorted(names))}); "
                        "peers verify the name they dial: recreate TLS material with that address",
                    )
    except KeystoreError as exc:
        return CheckResult("keystore", "fail", str(exc))
    return CheckResult("keystore", "ok", f"{t.keystore}: valid for {t.security} ({setting.kind})")


def shared_broker_port(requests: list[TrialRequest]) -> str:
    """A separate broker (mqtt-broker) serving plain and TLS trials on one port: one Mosquitto
    listener is either plain or TLS, so half of the campaign's trials would fail to connect."""
    from fieldtest.labrun.configuration.launchsettings import with_lab_defaults
    from fieldtest.middleware import registry
    from fieldtest.middleware.mqtt.settings import Settings as MqttSettings

    kinds: dict[tuple[str, int], set[str]] = {}
    for request in requests:
        t = request.transport
        if registry.get(t.middleware).infra_node == "broker":  # Mosquitto on a machine of its own
            port = with_lab_defaults(request).transport.settings(MqttSettings).port
            kinds.setdefault((t.broker_address, port), set()).add("plain" if t.security == "none" else "TLS")
    for (address, port), found in kinds.items():
        if len(found) > 1:
            return (
                f"mqtt_port: {port} for both plain and TLS trials on the broker at {address}: one "
                "listener cannot be both; leave mqtt_port out of the campaign (1883 plain, 8883 TLS)"
            )
    return ""


LAB_ROBOT_MODEL_PREFIX = "turtlebot4"  # turtlebot4-standard, turtlebot4-lite (TrialRequest.robot_model)
STATIC_TRIAL_DIR = "/trial"  # a stand-in path: the launch arguments are checked before any trial exists


def refuse_before_start(
    requests: list[TrialRequest], ros_distro: str, host_args: dict[str, str], robot_args: dict[str, str]
) -> None:
    """Both sides' launch arguments of every trial, checked before the first one starts: a
    combination that would leave the robot standing still (fieldtest.labrun.configuration.launchsettings) is a
    LaunchArgError naming the trial, the side and the field."""
    from fieldtest.labrun.configuration.launchsettings import LaunchArgError, launch_args_for_trial

    shared = shared_broker_port(requests)
    if shared:
        raise LaunchArgError(shared)
    for request in requests:
        if not request.robot_model.startswith(LAB_ROBOT_MODEL_PREFIX):
            raise LaunchArgError(
                f"trial {request.name}: robot_model: {request.robot_model} is the digital twin's robot; "
                "a lab campaign drives a TurtleBot 4 (turtlebot4-standard or turtlebot4-lite), "
                "or run this one with `fieldtest campaign`"
            )
        role: Role
        for role, extra in (("host", host_args), ("robot", robot_args)):
            try:
                launch_args_for_trial(
                    request, role, ros_distro=ros_distro, trial_dir=STATIC_TRIAL_DIR, extra=extra
                )
            except LaunchArgError as exc:
                raise LaunchArgError(f"trial {request.name} ({role} side): {exc}") from None


def gate_unfinished(report: dict[str, Any] | None) -> bool:
    """The robot's Create 3 gate has not given its verdict yet (no report, or only what it waits for):
    the robot's nodes start after it, so until then no probe can cross the link."""
    return report is None or "pending" in report


def with_gate(results: list[CheckResult], report: dict[str, Any] | None, gated: bool) -> list[CheckResult]:
    """The runner's checks and the Create 3 gate's, in the order their first failure is the cause:
    while a gate (``gated``) has not finished, the robot's nodes are not up and the link cannot be.
    A link that is up came without a gate (a robot side that has none), so then the usual order."""
    gate = check_robot_preflight(report)
    link_down = any(r.check == "robot-link" and not r.ok for r in results)
    return [*gate, *results] if gated and link_down and gate_unfinished(report) else [*results, *gate]


def check_robot_preflight(report: dict[str, Any] | None) -> list[CheckResult]:
    """The robot's create3_preflight report, split into the runner's create3 and battery checks."""
    if report is None:
        return [
            CheckResult(
                "create3",
                "fail",
                "no report from the Create 3 gate (create3_preflight, lab/robot_preflight.json) yet: "
                "see the robot side's log",
            ),
            CheckResult("battery", "fail", "no battery reading from the robot"),
        ]
    if "pending" in report:
        return [
            CheckResult(
                "create3",
                "fail",
                f"the Create 3 gate (create3_preflight) is still {report['pending']}; the robot's nodes "
                "start after it",
            )
        ]
    results = []
    for finding in report.get("findings", []):
        name = "battery" if finding.get("check") == "battery" else "create3"
        results.append(
            CheckResult(
                name, finding.get("severity", "fail"), f"{finding.get('check')}: {finding.get('detail')}"
            )
        )
    return results or [CheckResult("create3", "fail", "robot pre-flight report has no findings")]


def summarize(
    results: list[CheckResult], warn_only: list[str] | tuple[str, ...] = ()
) -> tuple[bool, list[CheckResult]]:
    out = [
        CheckResult(r.check, "warn", r.detail) if r.severity == "fail" and r.check in warn_only else r
        for r in results
    ]
    return all(r.ok for r in out), out


def format_results(results: list[CheckResult]) -> list[str]:
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    return [f"[{marks[r.severity]}] {r.check}: {r.detail}" for r in results]
