"""Stage 2, per-trial metrics: clock and latency, motion and laps, drift, APE and relative error,
mocap gaps, link traffic, what the base received, and the metrics.json schema (``schema``).
Imports only the loading stage."""
