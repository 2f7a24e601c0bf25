"""rmw_zenoh family (lab only): ``family`` (the name), ``lab`` (each side's rmw_zenohd),
``keystorematerial`` (the rmw_zenoh policy and per-node enclaves it adds to a kit keystore, through the
``keystore_material`` hook), ``security`` (where the lab finds the per-node Zenoh session configs
generated from them)."""
