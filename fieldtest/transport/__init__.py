"""Middleware transports: ``open_transport(config, role)`` returns a connected Transport."""

from __future__ import annotations

from .base import MIDDLEWARES, Role, Transport, TransportConfig, full_topic

__all__ = ["MIDDLEWARES", "Role", "Transport", "TransportConfig", "full_topic", "open_transport"]


def open_transport(config: TransportConfig, role: Role) -> Transport:
    """Join the link as ``role``; the library for the middleware is imported only when needed."""
    if config.middleware == "dds":
        from .dds import open_dds

        return open_dds(config, role)
    if config.middleware.startswith("zenoh") and config.zenoh_path == "bridge":
        from .dds import open_dds
        from .zenoh_bridge import side_dds_config

        return open_dds(side_dds_config(config, role), role)  # the side's bridge carries it on
    if config.middleware.startswith("zenoh"):
        from .zenoh_ import open_zenoh

        return open_zenoh(config, role)
    from .mqtt import open_mqtt

    return open_mqtt(config, role)
