"""DDS Security on Fast DDS: the same settings as CycloneDDS (one per governance profile, on the
kit's SROS2 enclaves), handed to the participant as Fast DDS's builtin plugins' properties (the
ones rmw_fastrtps sets from an enclave). Debian's libfastrtps 2.9 is built with the plugins
(PKI-DH, Access-Permissions, AES-GCM-GMAC: it links libssl3)."""

from __future__ import annotations

from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware.dds.security import SETTINGS as DDS_SETTINGS
from fieldtest.middleware.dds.security import dds_security_files
from fieldtest.security.enforce import require_credentials
from fieldtest.security.glue import check_governance_domain, keystore_of
from fieldtest.security.securitysettings import require_setting

SETTINGS = DDS_SETTINGS

AUTH = "dds.sec.auth.builtin.PKI-DH."
ACCESS = "dds.sec.access.builtin.Access-Permissions."


def fastdds_security_properties(keystore: str, role: str, setting: str) -> dict[str, str]:
    """The participant properties that turn on Fast DDS's builtin security plugins for ``role``."""
    files = dds_security_files(keystore, role, setting)
    return {
        "dds.sec.auth.plugin": "builtin.PKI-DH",
        AUTH + "identity_ca": f"file://{files.identity_ca}",
        AUTH + "identity_certificate": f"file://{files.certificate}",
        AUTH + "private_key": f"file://{files.private_key}",
        "dds.sec.access.plugin": "builtin.Access-Permissions",
        ACCESS + "permissions_ca": f"file://{files.permissions_ca}",
        ACCESS + "governance": f"file://{files.governance}",
        ACCESS + "permissions": f"file://{files.permissions}",
        "dds.sec.crypto.plugin": "builtin.AES-GCM-GMAC",
    }


def security_properties(config: TransportConfig, role: str) -> dict[str, str] | None:
    """The properties for ``role`` (None when plain), after checking its credentials and the
    governance's domain."""
    if config.security == "none":
        return None
    require_setting(config.security, config.middleware, SETTINGS)
    keystore = keystore_of(config)
    check_governance_domain(keystore, config.security, config.domain_id)
    properties = fastdds_security_properties(str(keystore), role, config.security)
    require_credentials(config, role)
    return properties
