"""Zenoh family (``zenoh-peer``, ``zenoh-router``): ``family`` (the names), ``transport`` (the kit's
Zenoh sessions), ``bridge`` (zenoh-bridge-ros2dds / zenohd with the ros2dds plugin)."""
