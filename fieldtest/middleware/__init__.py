"""One place per middleware (issue #13; docs/architecture.md).

- ``names``: the names and the plain facts the lower layers read (no imports).
- ``config``: ``TransportConfig``, the link settings a trial record holds.
- ``base``: ``Middleware``, what one middleware declares.
- ``dds``, ``zenoh``, ``mqtt``, ``rmw_zenoh``: one module per family, one object per name.
- ``registry``: ``get(name)``, ``names()``, ``families()``, ``open_transport``, ``infrastructure``.

This file imports nothing, so ``fieldtest.middleware.names`` and ``.config`` stay light.
"""
