"""The security fragments a transport needs, from its TransportConfig (``security`` + ``keystore``).

Each family's security fragment (``fieldtest.middleware.<family>.security``) hands these out after
checking the process' own credentials; they check that the setting applies to the
middleware, that a keystore is given, and that the keystore was made for the trial's domain and
addresses, so a mismatch fails with a message instead of a silent non-delivery.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509

from fieldtest.names import MQTT_TLS_PORT

from .governance import DEFAULT_GOVERNANCE, governance_domains
from .keystore import KeystoreError, governance_variant_path, load_cert, tls_files
from .settings import (
    SecuritySettingError,
    dds_security_xml,
    get_setting,
    mosquitto_acl,
    mosquitto_tls_lines,
    paho_tls_args,
    twin_link_flows,
    zenoh_security_overrides,
)


def _keystore(config: Any) -> Path:
    if not config.keystore:
        raise KeystoreError(
            f"security {config.security!r} needs a keystore (TransportConfig.keystore is empty)"
        )
    path = Path(config.keystore)
    if not path.is_dir():
        raise KeystoreError(f"{path}: keystore directory not found (create it with `fieldtest keys create`)")
    return path


def _check_domain(keystore: Path, setting: str, domain_id: int) -> None:
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


def cyclonedds_security_xml(config: Any, role: str) -> str:
    """``<Security>`` block for a DDS trial process of ``role``."""
    get_setting(config.security, config.middleware)
    keystore = _keystore(config)
    _check_domain(keystore, config.security, config.domain_id)
    return dds_security_xml(keystore, role, config.security)


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


def _listen_address(endpoint: str) -> str:
    host_port = endpoint.split("/", 1)[1]
    return host_port.rsplit(":", 1)[0]


def zenoh_config_overrides(config: Any, role: str, session_config: dict[str, Any]) -> dict[str, Any]:
    """Overrides for ``open_zenoh`` / the router: mTLS, tls/ endpoints and the access control."""
    get_setting(config.security, config.middleware)
    if config.security == "none":
        return {}
    keystore = _keystore(config)
    for endpoint in session_config.get("listen", {}).get("endpoints", []):
        require_tls_name(keystore, role, _listen_address(endpoint))
    return zenoh_security_overrides(
        keystore, role, config.security, namespace=config.namespace, session_config=session_config
    )


def mqtt_configure_client(config: Any, role: str) -> Callable[[Any], None]:
    """``configure_client`` for ``open_mqtt``: TLS with the role's client certificate."""
    get_setting(config.security, config.middleware)
    args = paho_tls_args(_keystore(config), role)

    def configure(client: Any) -> None:
        client.tls_set(**args)

    return configure


def mosquitto_listener_lines(
    config: Any, address: str, port: int, acl_path: Path | str | None = None
) -> list[str]:
    """The mosquitto.conf listener block for ``config.security`` (``mtls-acl``: TLS + ACL).

    The ACL file is written to ``acl_path`` (default: ``<keystore>/tls/mosquitto.acl``).
    """
    if get_setting(config.security, config.middleware).kind == "none":
        raise SecuritySettingError("security 'none' has no TLS listener (the broker's plain one serves it)")
    keystore = _keystore(config)
    require_tls_name(keystore, "broker", address)
    acl = Path(acl_path) if acl_path else keystore / "tls" / "mosquitto.acl"
    acl.write_text(mosquitto_acl(twin_link_flows(config.namespace)))
    return mosquitto_tls_lines(keystore, acl, port=port or MQTT_TLS_PORT, bind_address=address)
