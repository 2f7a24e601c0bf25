"""Middleware transports: one module per library (``dds``, ``zenoh_``, ``mqtt``) and the router and
broker processes (``broker``). Open one through ``fieldtest.middleware.registry.open_transport``,
which picks the module for ``config.middleware`` and hands it its security fragment."""

from __future__ import annotations

from .base import Role, Transport, TransportConfig, full_topic

__all__ = ["Role", "Transport", "TransportConfig", "full_topic"]
