"""``fieldtest perf``: latency, throughput, loss and CPU per message size over the trial's middlewares.

The message set and rates follow Zhang et al.'s runs of Apex.AI performance_test (TIERS/rmw_comparison
``params.ros2.*.yaml``: Array1k ... Array2m, PointCloud512k ... PointCloud2m, 10 Hz, 30 s); the round
trip is measured as performance_test's ``--roundtrip-mode Main``/``Relay`` does it. Every row runs
the kit's own transports (``fieldtest.middleware.registry``) in separate processes, on loopback or on
the twin's emulated links. See docs/perf.md.
"""
