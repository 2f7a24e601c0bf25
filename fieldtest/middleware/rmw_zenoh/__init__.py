"""rmw_zenoh family (lab only): ``family`` (the name), ``lab`` (each side's rmw_zenohd), ``security``
(where the lab finds the per-node Zenoh session configs generated from the keystore's rmw_zenoh
policy, which ``fieldtest.security.rmw_zenoh`` writes with the keystore)."""
