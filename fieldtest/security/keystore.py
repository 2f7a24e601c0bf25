"""An SROS2-layout keystore: the same files, names, links and signatures ``ros2 security`` makes.

Layout (as ``ros2 security create_keystore`` / ``create_enclave``)::

    public/ca.cert.pem           identity_ca.cert.pem -> ca.cert.pem   permissions_ca.cert.pem -> ca.cert.pem
    private/ca.key.pem           identity_ca.key.pem -> ca.key.pem     permissions_ca.key.pem -> ca.key.pem
    enclaves/governance.xml      enclaves/governance.p7s (S/MIME, signed by the permissions CA)
    enclaves/<enclave path>/     cert.pem key.pem permissions.xml permissions.p7s
                                 identity_ca.cert.pem permissions_ca.cert.pem governance.p7s (relative links)

Keys are ECDSA P-256 (DDS Security 9.3.1), certificates SHA-256, the identity CN is the enclave
path. The kit adds, without touching that layout:

    fieldtest/governance/<setting>.{xml,p7s}   one signed governance per DDS security setting
    fieldtest/policy.xml                       the SROS2 policy the permissions were made from
    fieldtest/<family>/..., enclaves/fieldtest/<family>/...
                                               what a middleware family adds (``extra_material``)
    tls/ca.pem, tls/<name>.{crt,key}           TLS material for Zenoh mTLS and Mosquitto, same CA

Signing uses cryptography's PKCS7SignatureBuilder (as SROS2 does); verification uses the openssl
tool (cryptography cannot verify PKCS#7).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fieldtest.errors import FieldtestError
from fieldtest.names import BROKER_IDENTITY, ROLE_ENCLAVES, ROUTER_IDENTITY

from .governance import DEFAULT_GOVERNANCE, GOVERNANCE_PROFILES, governance_domains, governance_xml
from .policy import KIT_ENCLAVES, EnclaveSpec, permissions_xml, policy_xml

PUBLIC, PRIVATE, ENCLAVES = "public", "private", "enclaves"
CA_COMMON_NAME = "sros2CA"
KIT_DIR = "fieldtest"
TLS_DIR = "tls"
CA_FILES = ("ca.cert.pem", "identity_ca.cert.pem", "permissions_ca.cert.pem")
CA_KEY_FILES = ("ca.key.pem", "identity_ca.key.pem", "permissions_ca.key.pem")
ENCLAVE_FILES = (
    "cert.pem",
    "key.pem",
    "identity_ca.cert.pem",
    "permissions_ca.cert.pem",
    "governance.p7s",
    "permissions.p7s",
)
# TLS identities: file stem -> certificate CN. Host and robot share their DDS enclave's name so
# one identity means the same party on every middleware; router and broker are infrastructure.
TLS_IDENTITIES = {**ROLE_ENCLAVES, "router": ROUTER_IDENTITY, "broker": BROKER_IDENTITY}
DEFAULT_TLS_NAMES = ("localhost", "127.0.0.1")


class KeystoreError(FieldtestError):
    """A keystore cannot be created or used; the message names the file and the problem."""


@dataclass(frozen=True)
class Validity:
    not_before: dt.datetime
    not_after: dt.datetime

    @classmethod
    def from_days(
        cls, valid_days: float = 3650, start_days: float = -1.0, now: dt.datetime | None = None
    ) -> Validity:
        """Valid from ``now + start_days`` for ``valid_days`` (a day back by default: clock skew)."""
        if valid_days <= 0:
            raise KeystoreError(f"validity must be positive, got {valid_days} days")
        now = (now or dt.datetime.now(dt.timezone.utc)).replace(microsecond=0)
        start = now + dt.timedelta(days=start_days)
        return cls(start, start + dt.timedelta(days=valid_days))


# ---------------------------------------------------------------- files and crypto primitives


def enclave_dir(keystore: Path | str, enclave: str) -> Path:
    relative = os.path.normpath(enclave.strip("/"))
    if relative.startswith("..") or not relative or relative == ".":
        raise KeystoreError(f"{keystore}: invalid enclave path {enclave!r}")
    return Path(keystore) / ENCLAVES / relative


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_cert(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise KeystoreError(f"{path}: cannot read certificate ({exc})") from exc


def validity_utc(cert: x509.Certificate) -> tuple[dt.datetime, dt.datetime]:
    """The certificate's (not before, not after), timezone-aware UTC. ``not_valid_*_utc`` came with
    cryptography 42; Ubuntu 24.04 ships 41.0.7, whose naive ``not_valid_*`` are UTC (and deprecated
    from 42 on)."""
    if hasattr(cert, "not_valid_after_utc"):
        return cert.not_valid_before_utc, cert.not_valid_after_utc
    return (
        cert.not_valid_before.replace(tzinfo=dt.timezone.utc),
        cert.not_valid_after.replace(tzinfo=dt.timezone.utc),
    )


def load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeystoreError(f"{path}: cannot read private key ({exc})") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise KeystoreError(f"{path}: not an elliptic-curve key")
    return key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def build_cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    validity: Validity,
    *,
    ca: bool = False,
    issuer: x509.Certificate | None = None,
    issuer_key: ec.EllipticCurvePrivateKey | None = None,
    extensions: Iterable[tuple[x509.ExtensionType, bool]] = (),
) -> x509.Certificate:
    """A certificate as SROS2 builds it: CA with pathlen 1 (critical), leaf with CA:FALSE."""
    constraints = (
        x509.BasicConstraints(ca=True, path_length=1)
        if ca
        else x509.BasicConstraints(ca=False, path_length=None)
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer.subject if issuer else _name(subject))
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity.not_before)
        .not_valid_after(validity.not_after)
        .public_key(key.public_key())
        .add_extension(constraints, critical=ca)
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer_key or key, hashes.SHA256())


def sign_smime(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, content: bytes) -> bytes:
    """Detached text/plain S/MIME signature, byte-compatible with SROS2's create_smime_signed_file."""
    builder = pkcs7.PKCS7SignatureBuilder().set_data(content).add_signer(cert, key, hashes.SHA256())
    options = [pkcs7.PKCS7Options.Text, pkcs7.PKCS7Options.DetachedSignature]
    return builder.sign(serialization.Encoding.SMIME, options)


def verify_smime(signed: Path, ca_cert: Path) -> bytes:
    """The signed content of an S/MIME file, after checking its signature chains to ``ca_cert``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KeystoreError("the openssl tool is needed to verify S/MIME signatures (apt install openssl)")
    result = subprocess.run(
        [
            openssl,
            "smime",
            "-verify",
            "-text",
            "-purpose",
            "any",
            "-in",
            str(signed),
            "-CAfile",
            str(ca_cert),
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if result.returncode != 0:
        reason = result.stderr.decode(errors="replace").strip().splitlines()
        detail = next((line for line in reason if "error" in line.lower()), reason[0] if reason else "")
        raise KeystoreError(f"{signed}: signature does not verify against {ca_cert.name} ({detail})")
    return result.stdout.replace(b"\r\n", b"\n")


def _symlink(dst: Path, target: Path | str) -> None:
    """Relative symlink like sros2's create_symlink; replaces whatever is at ``dst``."""
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    os.symlink(str(target), dst)


# ---------------------------------------------------------------- creation


@dataclass(frozen=True)
class KeystoreOptions:
    domain_id: int = 0
    namespace: str = ""
    validity: Validity | None = None
    enclaves: tuple[EnclaveSpec, ...] = KIT_ENCLAVES
    tls_names: tuple[str, ...] = ()  # extra host names / addresses for the TLS certificates


# Writes a family's own material into a keystore (``Middleware.keystore_material``): root, options, validity.
KeystoreMaterial = Callable[[Path, KeystoreOptions, Validity], None]


def create_keystore(
    path: Path | str, options: KeystoreOptions | None = None, extra_material: Iterable[KeystoreMaterial] = ()
) -> Path:
    """Create (or complete) a keystore with the kit's enclaves, governance variants and TLS files,
    then call each of ``extra_material`` (what a middleware family adds: the callers above both
    layers pass ``fieldtest.middleware.registry.keystore_material()``).

    An existing CA is kept, as ``ros2 security create_keystore`` does, so enclaves of a keystore
    made by SROS2 stay valid; enclaves, governance and TLS files are (re)written.
    """
    options = options or KeystoreOptions()
    if not 0 <= options.domain_id <= 232:
        raise KeystoreError(f"{path}: domain id {options.domain_id} out of range 0..232")
    validity = options.validity or Validity.from_days()
    root = Path(path)
    for sub in (PUBLIC, PRIVATE, ENCLAVES, f"{KIT_DIR}/governance"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    _ensure_ca(root, validity)
    write_governance_variants(root, options.domain_id)
    for spec in options.enclaves:
        create_enclave(
            root, spec, domain_id=options.domain_id, validity=validity, namespace=options.namespace
        )
    (root / KIT_DIR / "policy.xml").write_text(policy_xml(options.enclaves, options.namespace))
    for write in extra_material:
        write(root, options, validity)
    create_tls_material(root, names=options.tls_names, validity=validity)
    return root


def _ensure_ca(root: Path, validity: Validity) -> None:
    public, private = root / PUBLIC, root / PRIVATE
    if all((public / f).is_file() for f in CA_FILES[1:]) and all(
        (private / f).is_file() for f in CA_KEY_FILES[1:]
    ):
        return
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build_cert(CA_COMMON_NAME, key, validity, ca=True)
    _write_private(private / "ca.key.pem", _key_pem(key))
    (public / "ca.cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    for name in CA_FILES[1:]:
        _symlink(public / name, "ca.cert.pem")
    for name in CA_KEY_FILES[1:]:
        _symlink(private / name, "ca.key.pem")


def _permissions_signer(root: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    return (
        load_cert(root / PUBLIC / "permissions_ca.cert.pem"),
        load_key(root / PRIVATE / "permissions_ca.key.pem"),
    )


def governance_variant_path(keystore: Path | str, setting: str) -> Path:
    return Path(keystore) / KIT_DIR / "governance" / f"{setting}.p7s"


def write_governance_variants(root: Path, domain_id: int) -> None:
    """Sign one governance per profile; enclaves/governance.{xml,p7s} get SROS2's default."""
    cert, key = _permissions_signer(root)
    for name, profile in GOVERNANCE_PROFILES.items():
        text = governance_xml(profile, domain_id).encode()
        variant = governance_variant_path(root, name)
        variant.with_suffix(".xml").write_bytes(text)
        variant.write_bytes(sign_smime(cert, key, text))
    activate_governance(root, DEFAULT_GOVERNANCE)


def activate_governance(keystore: Path | str, setting: str) -> None:
    """Make ``setting`` the governance every enclave uses (enclaves/governance.* are copies).

    ROS 2 nodes read enclaves/<enclave>/governance.p7s, a link to enclaves/governance.p7s, so this
    switches the protection level of a lab run without touching the enclaves.
    """
    root = Path(keystore)
    variant = governance_variant_path(root, setting)
    if not variant.is_file():
        raise KeystoreError(f"{variant}: no governance for setting {setting!r} (run `fieldtest keys create`)")
    shutil.copyfile(variant.with_suffix(".xml"), root / ENCLAVES / "governance.xml")
    shutil.copyfile(variant, root / ENCLAVES / "governance.p7s")


def create_enclave(
    root: Path | str, spec: EnclaveSpec, *, domain_id: int, validity: Validity, namespace: str = ""
) -> Path:
    """Key, certificate (CN = enclave path), links and signed permissions of one enclave."""
    root = Path(root)
    folder = enclave_dir(root, spec.path)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("identity_ca.cert.pem", "permissions_ca.cert.pem"):
        _symlink(folder / name, os.path.relpath(root / PUBLIC / name, folder))
    _symlink(folder / "governance.p7s", os.path.relpath(root / ENCLAVES / "governance.p7s", folder))

    ca_cert = load_cert(root / PUBLIC / "identity_ca.cert.pem")
    ca_key = load_key(root / PRIVATE / "identity_ca.key.pem")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build_cert(spec.path, key, validity, issuer=ca_cert, issuer_key=ca_key)
    _write_private(folder / "key.pem", _key_pem(key))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    not_before, not_after = validity_utc(cert)
    text = permissions_xml(
        spec, domain_id=domain_id, not_before=not_before, not_after=not_after, namespace=namespace
    ).encode()
    (folder / "permissions.xml").write_bytes(text)
    signer_cert, signer_key = _permissions_signer(root)
    (folder / "permissions.p7s").write_bytes(sign_smime(signer_cert, signer_key, text))
    return folder


# ---------------------------------------------------------------- TLS material


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    common_name: str


def tls_files(keystore: Path | str, name: str) -> TlsFiles:
    folder = Path(keystore) / TLS_DIR
    if name not in TLS_IDENTITIES:
        raise KeystoreError(f"{folder}: no TLS identity {name!r} (known: {', '.join(TLS_IDENTITIES)})")
    return TlsFiles(folder / "ca.pem", folder / f"{name}.crt", folder / f"{name}.key", TLS_IDENTITIES[name])


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _tls_extensions(names: Iterable[str]) -> list[tuple[x509.ExtensionType, bool]]:
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    eku = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH])
    return [(_san(names), False), (usage, True), (eku, False)]


def issue_tls_set(
    folder: Path,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    names: Iterable[str] = (),
    validity: Validity | None = None,
    identities: dict[str, str] | None = None,
) -> dict[str, TlsFiles]:
    """ca.pem plus a certificate and key per identity, each valid as TLS server and client."""
    folder.mkdir(parents=True, exist_ok=True)
    validity = validity or Validity.from_days()
    (folder / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    all_names = (*DEFAULT_TLS_NAMES, *names)
    files = {}
    for stem, common_name in (identities or TLS_IDENTITIES).items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = build_cert(
            common_name,
            key,
            validity,
            issuer=ca_cert,
            issuer_key=ca_key,
            extensions=_tls_extensions(all_names),
        )
        _write_private(folder / f"{stem}.key", _key_pem(key))
        (folder / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[stem] = TlsFiles(folder / "ca.pem", folder / f"{stem}.crt", folder / f"{stem}.key", common_name)
    return files


def create_tls_material(
    keystore: Path | str, *, names: Iterable[str] = (), validity: Validity | None = None
) -> dict[str, TlsFiles]:
    """TLS certificates for Zenoh and Mosquitto signed by the keystore's identity CA."""
    root = Path(keystore)
    ca_cert = load_cert(root / PUBLIC / "identity_ca.cert.pem")
    ca_key = load_key(root / PRIVATE / "identity_ca.key.pem")
    return issue_tls_set(root / TLS_DIR, ca_cert, ca_key, names=names, validity=validity)


def create_rogue_tls(folder: Path | str, *, names: Iterable[str] = ()) -> dict[str, TlsFiles]:
    """The same identities (same CNs) under a different, untrusted CA: for tests that must be refused."""
    key = ec.generate_private_key(ec.SECP256R1())
    validity = Validity.from_days()
    ca = build_cert("rogue CA", key, validity, ca=True)
    return issue_tls_set(Path(folder), ca, key, names=names, validity=validity)


# ---------------------------------------------------------------- checking


def _is_file(path: Path) -> bool:
    return path.is_file()  # follows links, so a dangling link counts as missing


def cert_date_problems(cert: x509.Certificate, path: Path, now: dt.datetime) -> list[str]:
    not_before, not_after = validity_utc(cert)
    if now < not_before:
        return [f"{path}: certificate not valid before {not_before:%Y-%m-%d %H:%M} UTC"]
    if now > not_after:
        return [f"{path}: certificate expired on {not_after:%Y-%m-%d %H:%M} UTC"]
    return []


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate, path: Path, issuer_path: Path) -> list[str]:
    try:
        cert.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError, TypeError) as exc:
        return [f"{path}: not signed by {issuer_path} ({type(exc).__name__})"]
    return []


def _missing_ca_files(root: Path) -> list[str]:
    return [
        f"{root / sub / n}: missing"
        for sub, names in ((PUBLIC, CA_FILES[1:]), (PRIVATE, CA_KEY_FILES[1:]))
        for n in names
        if not _is_file(root / sub / n)
    ]


def _check_ca(root: Path, now: dt.datetime) -> list[str]:
    problems = []
    for kind in ("identity_ca", "permissions_ca"):
        cert_path = root / PUBLIC / f"{kind}.cert.pem"
        cert = load_cert(cert_path)
        problems += cert_date_problems(cert, cert_path, now)
        key = load_key(root / PRIVATE / f"{kind}.key.pem")
        if key.public_key() != cert.public_key():
            problems.append(f"{root / PRIVATE / kind}.key.pem: does not match {cert_path.name}")
    return problems


def _check_governance(root: Path) -> tuple[list[str], set[int]]:
    signed = root / ENCLAVES / "governance.p7s"
    if not _is_file(signed):
        return [f"{signed}: missing"], set()
    try:
        content = verify_smime(signed, root / PUBLIC / "permissions_ca.cert.pem")
        return [], set(governance_domains(content.decode()))
    except KeystoreError as exc:
        return [str(exc)], set()
    except ET.ParseError as exc:
        return [f"{signed}: signed content is not governance XML ({exc})"], set()


def list_enclaves(keystore: Path | str) -> list[str]:
    """Enclave paths of a keystore: every folder under enclaves/ holding a key.pem (as sros2)."""
    base = Path(keystore) / ENCLAVES
    return sorted("/" + p.parent.relative_to(base).as_posix() for p in base.glob("**/key.pem"))


def _same_governance(enclave_copy: Path, active: Path) -> bool:
    """The enclave's governance is the active one: a link to it (as created; reading both would race
    with a concurrent activation), or a copy with the same bytes."""
    if enclave_copy.is_symlink() and enclave_copy.resolve() == active.resolve():
        return True
    return enclave_copy.read_bytes() == active.read_bytes()


def _check_enclave(root: Path, enclave: str, domains: set[int], now: dt.datetime) -> list[str]:
    folder = enclave_dir(root, enclave)
    missing = [f"{folder / n}: missing" for n in ENCLAVE_FILES if not _is_file(folder / n)]
    if missing:
        return missing
    problems: list[str] = []
    cert = load_cert(folder / "cert.pem")
    problems += cert_date_problems(cert, folder / "cert.pem", now)
    problems += _issued_by(
        cert, load_cert(folder / "identity_ca.cert.pem"), folder / "cert.pem", folder / "identity_ca.cert.pem"
    )
    if load_key(folder / "key.pem").public_key() != cert.public_key():
        problems.append(f"{folder / 'key.pem'}: does not match cert.pem")
    if not _same_governance(folder / "governance.p7s", root / ENCLAVES / "governance.p7s"):
        problems.append(f"{folder / 'governance.p7s'}: differs from {root / ENCLAVES / 'governance.p7s'}")
    try:
        content = verify_smime(folder / "permissions.p7s", folder / "permissions_ca.cert.pem")
    except KeystoreError as exc:
        return [*problems, str(exc)]
    problems += _check_permissions(folder / "permissions.p7s", content, cert, domains, now)
    return problems


def _dds_name(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string()


def _parse_time(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _check_permissions(
    path: Path, content: bytes, cert: x509.Certificate, domains: set[int], now: dt.datetime
) -> list[str]:
    try:
        root = ET.fromstring(content)
    except ET.ParseError as exc:
        return [f"{path}: signed content is not permissions XML ({exc})"]
    subject = _dds_name(cert)
    grants = [g for g in root.iter("grant") if (g.findtext("subject_name") or "").strip() == subject]
    if not grants:
        return [f"{path}: no grant for the certificate subject {subject}"]
    problems = []
    validity = grants[0].find("validity")
    if validity is not None:
        try:
            start, end = (
                _parse_time(validity.findtext("not_before", "")),
                _parse_time(validity.findtext("not_after", "")),
            )
        except ValueError as exc:
            return [f"{path}: unreadable validity ({exc})"]
        if now < start:
            problems.append(f"{path}: permissions not valid before {start:%Y-%m-%d %H:%M} UTC")
        elif now > end:
            problems.append(f"{path}: permissions expired on {end:%Y-%m-%d %H:%M} UTC")
    granted = set(governance_domains(ET.tostring(grants[0], encoding="unicode")))
    if domains and granted and not domains & granted:
        problems.append(f"{path}: grants domains {sorted(granted)} but governance covers {sorted(domains)}")
    return problems


@dataclass(frozen=True)
class AllowRule:
    """One ``allow_rule`` of an enclave's signed permissions: DDS topic patterns (fnmatch, as
    the DDS Security access control matches them) per domain."""

    domains: frozenset[int]
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def allows(self, action: str, topic: str, domain_id: int) -> bool:
        from fnmatch import fnmatchcase

        patterns = self.publish if action == "publish" else self.subscribe
        return domain_id in self.domains and any(fnmatchcase(topic, p) for p in patterns)


def enclave_allow_rules(keystore: Path | str, enclave: str) -> tuple[Path, list[AllowRule]]:
    """The signed permissions file of ``enclave`` and its allow rules for the enclave's own
    certificate subject: what a DDS participant with that identity may publish and subscribe."""
    folder = require_enclave_files(keystore, enclave)
    signed = folder / "permissions.p7s"
    content = verify_smime(signed, folder / "permissions_ca.cert.pem")
    subject = _dds_name(load_cert(folder / "cert.pem"))
    try:
        root = ET.fromstring(content)
    except ET.ParseError as exc:
        raise KeystoreError(f"{signed}: signed content is not permissions XML ({exc})") from None
    rules = []
    for grant in root.iter("grant"):
        if (grant.findtext("subject_name") or "").strip() != subject:
            continue
        for rule in grant.findall("allow_rule"):
            topics = {
                action: tuple(t.text or "" for t in rule.findall(f"{action}/topics/topic"))
                for action in ("publish", "subscribe")
            }
            domains = frozenset(governance_domains(ET.tostring(rule, encoding="unicode")))
            rules.append(AllowRule(domains, topics["publish"], topics["subscribe"]))
    return signed, rules


def signed_governance_domains(governance_p7s: Path | str, keystore: Path | str) -> set[int]:
    """Domain ids a signed governance document covers (verified against the permissions CA)."""
    content = verify_smime(Path(governance_p7s), Path(keystore) / PUBLIC / "permissions_ca.cert.pem")
    return set(governance_domains(content.decode()))


def check_keystore(path: Path | str, now: dt.datetime | None = None) -> list[str]:
    """Every problem found in a whole keystore (empty list = usable), each naming the file at fault
    (``fieldtest.security.machineshare.check_keystore`` also takes a machine's share).

    Checks the CA files, that governance and every enclave's permissions are signed by the
    permissions CA, that enclave certificates chain to the identity CA and match their keys, the
    validity dates of certificates and permissions, and that enclaves use the keystore governance.
    """
    root = Path(path)
    now = now or dt.datetime.now(dt.timezone.utc)
    if not root.is_dir():
        return [f"{root}: no such keystore directory"]
    missing = _missing_ca_files(root)
    if missing:
        return missing
    try:
        problems = _check_ca(root, now)
    except KeystoreError as exc:
        return [str(exc)]
    gov_problems, domains = _check_governance(root)
    problems += gov_problems
    enclaves = list_enclaves(root)
    if not enclaves:
        problems.append(f"{root / ENCLAVES}: no enclaves")
    for enclave in enclaves:
        try:
            problems += _check_enclave(root, enclave, domains, now)
        except KeystoreError as exc:  # an unreadable certificate or key
            problems.append(str(exc))
    return problems


def require_enclave_files(keystore: Path | str, enclave: str) -> Path:
    """The enclave folder, or a KeystoreError naming the first missing file."""
    folder = enclave_dir(keystore, enclave)
    for name in ENCLAVE_FILES:
        if not _is_file(folder / name):
            raise KeystoreError(f"{folder / name}: missing (enclave {enclave} of keystore {keystore})")
    return folder
