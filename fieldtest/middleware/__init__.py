"""One place per middleware (issue #13; docs/architecture.md).

- ``base``: ``Middleware``, what one middleware declares.
- ``dds``, ``zenoh``, ``mqtt``, ``rmw_zenoh``: one module per family, one object per name.
- ``registry``: ``get(name)``, ``names()``, ``families()``, ``open_transport``, ``infrastructure``.

The catalog of names (``fieldtest.catalog``) and ``TransportConfig`` (``fieldtest.linkconfig``)
are plain data below every layer that reads them.
"""
