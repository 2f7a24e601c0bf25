"""DDS's security: the settings it takes (DDS Security, one per governance profile, on the SROS2
enclaves) and its fragments: the CycloneDDS ``<Security>`` element for CYCLONEDDS_URI (``dds_security_xml``)
or the equivalent ``dds.sec.*`` participant properties (``dds_security_properties``), with the
governance of the chosen protection level; ``security_xml`` hands a role its element after checking
the role's own credentials and the governance's domain."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from fieldtest.linkconfig import TransportConfig
from fieldtest.security.enforce import require_credentials
from fieldtest.security.glue import check_governance_domain, keystore_of
from fieldtest.security.governance import DEFAULT_GOVERNANCE
from fieldtest.security.keystore import require_enclave_files
from fieldtest.security.securitysettings import (
    DDS_SECURITY_SETTINGS,
    SecuritySetting,
    enclave_path,
    governance_path,
    require_setting,
)

SETTINGS = ("none", *DDS_SECURITY_SETTINGS)

# CycloneDDS security plugins: bare names as rmw_cyclonedds passes them (the loader finds
# Debian's libdds_security_*.so), with their entry points.
DDS_PLUGINS = {
    "auth": ("dds_security_auth", "init_authentication", "finalize_authentication"),
    "access": ("dds_security_ac", "init_access_control", "finalize_access_control"),
    "crypto": ("dds_security_crypto", "init_crypto", "finalize_crypto"),
}


def missing_security_plugins() -> list[str]:
    """The DDS_PLUGINS libraries this Python's CycloneDDS binding cannot load, [] when all are
    there. The PyPI wheel bundles its own libddsc, built without them (``in_wheel``); a binding
    built against an installed CycloneDDS (tools/install.sh: Debian's libddsc0debian) finds them
    beside that library or in a folder of its own there."""
    import glob

    names = [library for library, _init, _finalize in DDS_PLUGINS.values()]
    try:
        from cyclonedds import __library__ as binding
    except ImportError:
        return names
    if getattr(binding, "in_wheel", False) or not getattr(binding, "library_path", ""):
        return names
    loaded = _loaded_libddsc()
    folder = os.path.dirname(loaded or os.path.realpath(binding.library_path))
    return [
        name
        for name in names
        if not any(glob.glob(os.path.join(folder, *sub, f"lib{name}.so*")) for sub in ((), ("*",)))
    ]


def _loaded_libddsc() -> str | None:
    """The libddsc file this process loaded with the binding (/proc/self/maps), or None: the
    binding falls back to the system's library when the path it was built with cannot be read
    (another user's build prefix), and the plugins must sit beside the library it loaded."""
    try:
        import cyclonedds.internal  # noqa: F401  (loads libddsc)

        with open("/proc/self/maps") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if "libddsc.so" in line}
    except (ImportError, OSError):
        return None
    found = sorted(p for p in paths if os.path.basename(p).startswith("libddsc.so"))
    return found[0] if found else None


def takes(setting: str) -> SecuritySetting:
    """``setting``, if DDS takes it (SecuritySettingError otherwise)."""
    return require_setting(setting, "dds", SETTINGS)


@dataclass(frozen=True)
class DdsSecurityFiles:
    identity_ca: Path
    certificate: Path
    private_key: Path
    permissions_ca: Path
    governance: Path
    permissions: Path


def dds_security_files(
    keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE
) -> DdsSecurityFiles:
    """Absolute paths of the six files a secure participant of ``role`` (or enclave path) loads.

    Raises KeystoreError naming the first missing file, so a trial fails before the participant
    does (Cyclone only says that the security plugins failed to initialise).
    """
    takes(setting)
    folder = require_enclave_files(keystore, enclave_path(role)).absolute()
    return DdsSecurityFiles(
        identity_ca=folder / "identity_ca.cert.pem",
        certificate=folder / "cert.pem",
        private_key=folder / "key.pem",
        permissions_ca=folder / "permissions_ca.cert.pem",
        governance=governance_path(keystore, role, setting),
        permissions=folder / "permissions.p7s",
    )


def _uri(path: Path) -> str:
    return "file:" + str(path)


def dds_security_properties(
    keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE
) -> dict[str, str]:
    """The ``dds.sec.*`` participant properties (the keys rmw_cyclonedds sets)."""
    files = dds_security_files(keystore, role, setting)
    props = {
        "dds.sec.auth.identity_ca": _uri(files.identity_ca),
        "dds.sec.auth.identity_certificate": _uri(files.certificate),
        "dds.sec.auth.private_key": _uri(files.private_key),
        "dds.sec.access.permissions_ca": _uri(files.permissions_ca),
        "dds.sec.access.governance": _uri(files.governance),
        "dds.sec.access.permissions": _uri(files.permissions),
    }
    for short, (library, init, finalize) in DDS_PLUGINS.items():
        props[f"dds.sec.{short}.library.path"] = library
        props[f"dds.sec.{short}.library.init"] = init
        props[f"dds.sec.{short}.library.finalize"] = finalize
    return props


def _library(kind: str) -> str:
    path, init, finalize = DDS_PLUGINS[kind]
    return f"<Library path={quoteattr(path)} initFunction={quoteattr(init)} finalizeFunction={quoteattr(finalize)}/>"


def dds_security_xml(keystore: Path | str, role: str, setting: str = DEFAULT_GOVERNANCE) -> str:
    """The ``<Security>`` element to place inside CYCLONEDDS_URI's ``<Domain>``."""
    f = dds_security_files(keystore, role, setting)
    return (
        "<Security>"
        f"<Authentication>{_library('auth')}"
        f"<IdentityCA>{_uri(f.identity_ca)}</IdentityCA>"
        f"<IdentityCertificate>{_uri(f.certificate)}</IdentityCertificate>"
        f"<PrivateKey>{_uri(f.private_key)}</PrivateKey>"
        "</Authentication>"
        f"<AccessControl>{_library('access')}"
        f"<PermissionsCA>{_uri(f.permissions_ca)}</PermissionsCA>"
        f"<Governance>{_uri(f.governance)}</Governance>"
        f"<Permissions>{_uri(f.permissions)}</Permissions>"
        "</AccessControl>"
        f"<Cryptographic>{_library('crypto')}</Cryptographic>"
        "</Security>"
    )


def cyclonedds_security_xml(config: TransportConfig, role: str) -> str:
    """``<Security>`` block for a DDS trial process of ``role`` (the governance checked against the
    trial's domain)."""
    require_setting(config.security, config.middleware, SETTINGS)
    keystore = keystore_of(config)
    check_governance_domain(keystore, config.security, config.domain_id)
    return dds_security_xml(keystore, role, config.security)


def security_xml(config: TransportConfig, role: str) -> str:
    """The ``<Security>`` element for ``role`` (empty when plain), after checking its credentials."""
    if config.security == "none":
        return ""
    xml = cyclonedds_security_xml(config, role)
    require_credentials(config, role)
    return xml
