"""Zenoh's security fragment: mutual TLS and access control overrides of a session or router
config, after checking the role's own TLS identity."""

from __future__ import annotations

from typing import Any

from fieldtest.linkconfig import TransportConfig
from fieldtest.security import glue
from fieldtest.security.enforce import require_credentials
from fieldtest.security.settings import get_setting


def config_overrides(config: TransportConfig, role: str, session_config: dict[str, Any]) -> dict[str, Any]:
    """What ``role``'s session (or the router's) needs deep-merged into ``session_config``."""
    get_setting(config.security, config.middleware)
    if config.security == "none":
        return {}
    require_credentials(config, role)
    return glue.zenoh_config_overrides(config, role, session_config)
