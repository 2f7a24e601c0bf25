"""One home per middleware family (docs/architecture.md, "The middleware packages").

- ``declaration``: ``Middleware``, what one middleware declares, and the hooks the twin and the lab ask.
- ``registry``: ``get(name)``, ``names()``, ``families()``, ``open_transport``, ``infrastructure``,
  ``lab_launch_problem``; its docstring says what a family package holds.
- ``launch``: ``LabLaunch`` (one lab side's launch settings) and ``SideProcess``.
- ``labshared``: the lab side every family shares (the link's topics, the recorder, ``side_processes``).
- ``dds``, ``zenoh``, ``mqtt``, ``rmw_zenoh``: one package per family, the same file names in each
  (``family``, ``settings``, ``transport``, ``infra``, ``lab``), found by the registry from the
  catalog. This file imports nothing: a family's ``settings`` is plain data every layer reads.

The catalog of names (``fieldtest.catalog``) and ``TransportConfig`` (``fieldtest.linkconfig``)
are plain data below every layer that reads them.
"""
