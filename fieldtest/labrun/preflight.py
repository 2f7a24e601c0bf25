"""Pre-flight checks of a lab trial: each takes what the runner can observe and says go or no-go.

- robot link: the robot's clock probes reach the host (host status) and the host's replies reach
  the robot (robot status) over the trial's own middleware: both directions of the link work;
- clock: the robot's minimum-delay offset estimate of host - robot and its round trip are small
  (chrony between host and Pi working) - latencies are corrected anyway, but a large offset means
  time sync is broken and the round trip shows a slow link before the robot moves;
- mocap: the recorder receives frames at a sane rate with the rigid body tracked;
- keystore: for a secure trial, the keystore checks out, holds the enclaves/TLS identities the
  trial uses, stays valid through the trial, and TLS certificates name the addresses the peers dial;
- base: the robot's Create 3 pre-flight report (speed cap, reflexes, watchdog, battery).

``summarize`` turns failures of checks listed in ``warn_only`` into warnings.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from fieldtest.middleware.names import catalog_entry
from fieldtest.record import TrialRequest

Severity = Literal["ok", "warn", "fail"]
CHECKS = ("robot-link", "clock", "mocap", "keystore", "create3", "battery")


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
    host: dict[str, Any] | None, robot: dict[str, Any] | None, max_age_s: float = 2.0
) -> CheckResult:
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
    return CheckResult(
        "robot-link",
        "ok",
        f"probes both ways: {host['probes_answered']} answered by the host, "
        f"{robot['probes_completed']} completed on the robot",
    )


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
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_path.read_bytes()).not_valid_after_utc


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


def check_keystore(
    request: TrialRequest, *, trial_length_s: float = 0.0, now: dt.datetime | None = None
) -> CheckResult:
    t = request.transport
    if t.security == "none":
        return CheckResult("keystore", "ok", "security off: no keystore needed")
    from fieldtest.security.keystore import KeystoreError, tls_files
    from fieldtest.security.keystore import check_keystore as keystore_problems
    from fieldtest.security.settings import SecuritySettingError, dds_security_files, get_setting

    now = now or dt.datetime.now(dt.timezone.utc)
    if not t.keystore:
        return CheckResult("keystore", "fail", f"security {t.security!r} but no keystore path in the trial")
    t = t.model_copy(update={"keystore": str(Path(t.keystore).expanduser())})
    request = request.model_copy(update={"transport": t})
    try:
        setting = get_setting(t.security, t.middleware)
    except SecuritySettingError as exc:
        return CheckResult("keystore", "fail", str(exc))
    problems = keystore_problems(t.keystore, now=now)
    if problems:
        return CheckResult(
            "keystore",
            "fail",
            f"{problems[0]} (+{len(problems) - 1} more)" if len(problems) > 1 else problems[0],
        )
    end = now + dt.timedelta(seconds=trial_length_s + 3600)  # valid through the trial and the hour after
    try:
        if setting.kind == "dds":
            for role in ("host", "robot"):
                files = dds_security_files(t.keystore, role, t.security)
                if _not_after(files.certificate) < end:
                    return CheckResult(
                        "keystore", "fail", f"{files.certificate}: expires before the trial ends"
                    )
        else:
            for role in ("host", "robot", *dialled_identities(request)):
                files = tls_files(t.keystore, role)
                if not files.cert.is_file():
                    return CheckResult("keystore", "fail", f"{files.cert}: missing (fieldtest keys tls)")
                if _not_after(files.cert) < end:
                    return CheckResult("keystore", "fail", f"{files.cert}: expires before the trial ends")
            for role, address in dialled_identities(request).items():
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


def check_robot_preflight(report: dict[str, Any] | None) -> list[CheckResult]:
    """The robot's create3_preflight report, split into the runner's create3 and battery checks."""
    if report is None:
        return [
            CheckResult("create3", "fail", "no robot pre-flight report (lab/robot_preflight.json)"),
            CheckResult("battery", "fail", "no battery reading from the robot"),
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
