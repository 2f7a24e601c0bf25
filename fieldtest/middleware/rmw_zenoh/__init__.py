"""rmw_zenoh family (lab only): ``family`` (the name). Its keystore material (per-node Zenoh session
configs from the SROS2 keystore) is made by ``fieldtest.security.rmw_zenoh``."""
