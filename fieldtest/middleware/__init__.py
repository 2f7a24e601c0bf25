"""One home per middleware family (docs/architecture.md, "The middleware packages").

- ``base``: ``Middleware``, what one middleware declares, and the hooks the twin and the lab ask.
- ``registry``: ``get(name)``, ``names()``, ``families()``, ``open_transport``, ``infrastructure``.
- ``launch``: ``LabLaunch`` (one lab side's launch settings) and ``SideProcess``.
- ``lab``: the lab side every family shares (the link's topics, the recorder, ``side_processes``).
- ``dds``, ``zenoh``, ``mqtt``, ``rmw_zenoh``: one package per family, the same file names in each
  (``family``, ``transport``, ``infra``, ``lab``).

The catalog of names (``fieldtest.catalog``) and ``TransportConfig`` (``fieldtest.linkconfig``)
are plain data below every layer that reads them.
"""
