"""``fieldtest perf``: latency, throughput, loss and CPU per message size over the trial's middlewares.

The message set and rates follow Zhang et al.'s runs of Apex.AI performance_test (TIERS/rmw_comparison
``relay_dds.sh``: ``perf_test -r 10 -m $msg --max-runtime 30 --roundtrip-mode Relay``/``Main`` over
Array1k ... Array2m, PointCloud512k ... PointCloud2m; its ``params.ros2.<Msg>.yaml`` are only the
mqtt_client bridge's topics); the round
trip is measured as performance_test's ``--roundtrip-mode Main``/``Relay`` does it. Every row runs
the kit's own transports (``fieldtest.middleware.registry``) in separate processes, on loopback or on
the twin's emulated links; bridged Zenoh rows add the lab's bridges as a twin trial does. A sweep
comes from the command line or a perf campaign file (``fieldtest.perf.perfcampaign``). See docs/perf.md.
"""
