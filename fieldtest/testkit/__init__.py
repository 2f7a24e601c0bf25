"""Helpers for the kit's own tests and benchmarks, not part of a trial.

- ``synth``: synthetic trials with known answers (real trial directories written with BagWriter).
- ``ddsperf``: CycloneDDS's own ``ddsperf`` ping/pong, the latency reference of the benchmarks.
- ``sched``: whether this machine grants the kit real-time scheduling (what tests then expect).

Installed with the package so the benchmarks (benchmarks/) can import them as well as the tests.
"""
