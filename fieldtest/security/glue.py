"""What every family's security fragment checks on a ``TransportConfig`` (``security`` + ``keystore``)
before it builds its fragment (``fieldtest.middleware.<family>.security``): that a keystore is given,
that it was made for the trial's domain (the governance) and addresses (the TLS names), so a
mismatch fails with a message instead of a silent non-delivery.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from cryptography import x509

from .governance import DEFAULT_GOVERNANCE, governance_domains
from .keystore import KeystoreError, governance_variant_path, load_cert, tls_files
from .securitysettings import get_setting


def keystore_of(config: Any) -> Path:
    """``config.keystore``, which must be an existing folder."""
    if not config.keystore:
        raise KeystoreError(
            f"security {config.security!r} needs a keystore (TransportConfig.keystore is empty)"
        )
    path = Path(config.keystore)
    if not path.is_dir():
        raise KeystoreError(f"{path}: keystore directory not found (create it with `fieldtest keys create`)")
    return path


def check_governance_domain(keystore: Path, setting: str, domain_id: int) -> None:
    """Fail clearly unless the governance of ``setting`` covers ``domain_id``."""
    governance = get_setting(setting).governance or DEFAULT_GOVERNANCE
    xml_path = governance_variant_path(keystore, governance).with_suffix(".xml")
    if not xml_path.is_file():
        return  # a keystore made by `ros2 security` alone: Cyclone checks the signed file itself
    domains = governance_domains(xml_path.read_text())
    if domain_id not in domains:
        raise KeystoreError(
            f"{xml_path}: made for domain {domains}, the trial uses domain {domain_id} "
            f"(recreate with `fieldtest keys create --domain-id {domain_id}`)"
        )


def _cert_names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} | set(
        san.get_values_for_type(x509.DNSName)
    )


def require_tls_name(keystore: Path, identity: str, address: str) -> None:
    """Fail clearly if ``identity``'s TLS certificate does not name ``address`` (peers verify it)."""
    cert_path = tls_files(keystore, identity).cert
    names = _cert_names(load_cert(cert_path))
    try:
        address = str(ipaddress.ip_address(address.strip("[]")))
    except ValueError:
        pass
    if address not in names and address not in ("0.0.0.0", "::"):
        raise KeystoreError(
            f"{cert_path}: does not name {address} (has {', '.join(sorted(names))}); "
            f"run `fieldtest keys tls --keystore {keystore} --tls-name {address}`"
        )
