"""DDS's security fragment: the CycloneDDS ``<Security>`` element of a role (DDS Security, the
SROS2 enclaves), after checking the role's own credentials."""

from __future__ import annotations

from fieldtest.linkconfig import TransportConfig
from fieldtest.security import glue
from fieldtest.security.enforce import require_credentials


def security_xml(config: TransportConfig, role: str) -> str:
    """The ``<Security>`` element for ``role`` (empty when plain), after checking its credentials."""
    if config.security == "none":
        return ""
    xml = glue.cyclonedds_security_xml(config, role)
    require_credentials(config, role)
    return xml
