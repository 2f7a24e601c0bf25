"""Security settings a trial can select, and the family-independent parts of their fragments.

``SECURITY_SETTINGS`` maps a setting name to what it protects. Which settings a middleware takes,
and the fragment each one implies for its transport, router, broker or bridge, belong to its family
(``fieldtest.middleware.<family>.security``, the ``Middleware.security_settings`` hook); this module
checks a name against what a middleware declares (``require_setting``) and holds what every family
shares: the governance of a DDS Security setting and the TLS files of an identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fieldtest.errors import FieldtestError

from .governance import DEFAULT_GOVERNANCE, GOVERNANCE_PROFILES
from .keystore import (
    TLS_IDENTITIES,
    KeystoreError,
    TlsFiles,
    enclave_dir,
    governance_variant_path,
    require_enclave_files,
    tls_files,
)
from .policy import kit_enclave


class SecuritySettingError(FieldtestError, ValueError):
    """An unknown setting, or one that does not apply to the chosen middleware."""


@dataclass(frozen=True)
class SecuritySetting:
    name: str
    # "none", "dds-security" (DDS Security governance, SROS2 enclaves) or "tls" (mutual TLS + ACL)
    kind: str
    summary: str
    governance: str | None = None


SECURITY_SETTINGS: dict[str, SecuritySetting] = {
    "none": SecuritySetting("none", "none", "no authentication, no encryption, no access control"),
    **{
        name: SecuritySetting(name, "dds-security", f"DDS Security: {profile.summary}", governance=name)
        for name, profile in GOVERNANCE_PROFILES.items()
    },
    "mtls-acl": SecuritySetting(
        "mtls-acl",
        "tls",
        "Zenoh: mutual TLS + access control; MQTT: TLS with client certificates, no anonymous, per-identity ACL",
    ),
}
# The settings of each kind, in SECURITY_SETTINGS order (what a family declares it takes).
DDS_SECURITY_SETTINGS = tuple(n for n, s in SECURITY_SETTINGS.items() if s.kind == "dds-security")
TLS_SETTINGS = tuple(n for n, s in SECURITY_SETTINGS.items() if s.kind == "tls")


def get_setting(name: str) -> SecuritySetting:
    """The setting called ``name``."""
    try:
        return SECURITY_SETTINGS[name]
    except KeyError:
        raise SecuritySettingError(
            f"unknown security setting {name!r} (known: {', '.join(SECURITY_SETTINGS)})"
        ) from None


def require_setting(name: str, middleware: str, takes: tuple[str, ...]) -> SecuritySetting:
    """The setting called ``name``, if it is one of ``takes``, the settings ``middleware`` declares."""
    setting = get_setting(name)
    if name not in takes:
        raise SecuritySettingError(
            f"security setting {name!r} does not apply to middleware {middleware!r} "
            f"(it takes: {', '.join(takes) or 'none of the kit settings'})"
        )
    return setting


def enclave_path(role: str) -> str:
    """The SROS2 enclave path of a kit role (an enclave path stays as it is)."""
    return role if role.startswith("/") else kit_enclave(role).path


def governance_path(keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE) -> Path:
    """The signed governance a participant of ``role`` loads for DDS Security ``setting``.

    Raises KeystoreError naming the first missing file (the enclave's or the governance)."""
    governance = get_setting(setting).governance or DEFAULT_GOVERNANCE
    folder = require_enclave_files(keystore, enclave_path(role)).absolute()
    path = governance_variant_path(keystore, governance).absolute()
    if governance == DEFAULT_GOVERNANCE and not path.is_file():
        path = folder / "governance.p7s"  # a keystore made by `ros2 security` alone
    if not path.is_file():
        raise KeystoreError(f"{path}: missing governance for setting {setting!r}")
    return path


def ros_security_env(keystore: Path | str, role: str) -> dict[str, str]:
    """Environment for a ROS 2 node of the lab (run it with ``--ros-args --enclave <path>``)."""
    enclave = enclave_path(role)
    require_enclave_files(keystore, enclave)
    return {
        "ROS_SECURITY_KEYSTORE": str(Path(keystore).absolute()),
        "ROS_SECURITY_ENABLE": "true",
        "ROS_SECURITY_STRATEGY": "Enforce",
        "ROS_SECURITY_ENCLAVE_OVERRIDE": enclave,
    }


def tls_common_name(role: str) -> str:
    return TLS_IDENTITIES[role]


def present_tls_files(keystore: Path | str, identity: str) -> TlsFiles:
    """``identity``'s CA, certificate and key, each checked to exist (KeystoreError names the first)."""
    files = tls_files(keystore, identity)
    for path in (files.ca, files.cert, files.key):
        if not path.is_file():
            raise KeystoreError(f"{path}: missing (run `fieldtest keys tls`)")
    return files


__all__ = [
    "DDS_SECURITY_SETTINGS",
    "SECURITY_SETTINGS",
    "TLS_SETTINGS",
    "SecuritySetting",
    "SecuritySettingError",
    "enclave_dir",
    "enclave_path",
    "get_setting",
    "governance_path",
    "present_tls_files",
    "require_setting",
    "ros_security_env",
    "tls_common_name",
]
