"""The RMW environment of every lab process, and the CycloneDDS configuration it points at.

Rules (ROS 2 Humble and Jazzy, CycloneDDS as the RMW as in the seed study):

- Bridged middlewares (Zenoh, MQTT): DDS must stay on each machine so only the bridge crosses the
  network. Humble: ``ROS_LOCALHOST_ONLY=1``. Jazzy: ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
  (Jazzy ignores ROS_LOCALHOST_ONLY with a deprecation warning, so it is removed). On the robot the
  base still has to hear the bridge's ``/cmd_vel``: with ``base_interface`` set (usb0 on a
  TurtleBot 4 whose Create 3 is not behind the Jazzy ``create3_republisher``), DDS is pinned to
  that interface instead, so it reaches the base but never the Wi-Fi.
- Plain DDS: discovery over the lab network. With ``network_interface`` CycloneDDS is pinned to it
  and multicast is limited to discovery (``AllowMulticast spdp``): data goes unicast, which keeps
  RTPS from flooding the Wi-Fi. With ``dds_peers`` discovery is unicast to those peers plus
  127.0.0.1 (without multicast, processes on the same machine find each other only through a
  local peer); Jazzy gets the given peers as ``ROS_STATIC_PEERS`` too.
- SROS2 (security on with plain DDS): ``ROS_SECURITY_KEYSTORE``, ``ROS_SECURITY_ENABLE``,
  ``ROS_SECURITY_STRATEGY=Enforce``; each node gets its enclave with ``--ros-args --enclave``.
  rmw_zenoh ignores all of that: it is secured by per-node Zenoh session configs and a router
  config (``fieldtest.middleware.rmw_zenoh.security``, set up in launchplan and ``middleware.rmw_zenoh.lab``).
  zenoh-bridge-ros2dds cannot join a secure DDS domain and the bridged cases keep DDS on the
  machine, so there security protects the inter-machine hop (Zenoh mTLS, MQTT TLS) instead.
- Where the kit writes no CycloneDDS file, ``CYCLONEDDS_URI`` is unset: the TurtleBot 4's own
  setup.bash points it at a file pinned to wlan0. A Zenoh bridge beside Fast DDS nodes gets its own
  (``bridge_cyclonedds_uri``): it is CycloneDDS inside.
- Fast DDS (``dds:=fastrtps``): RMW_IMPLEMENTATION changes, the CycloneDDS file is not used; the
  Create 3 must run its Fast DDS firmware then (see docs/lab-guide.md). When both machines are
  this one (``host_address`` = ``robot_address`` = 127.0.0.1: a rehearsal), a Fast DDS profile
  keeps it to one UDPv4 transport on 127.0.0.1: by default Fast DDS announces its other addresses
  and shared memory, and a CycloneDDS peer pinned to loopback then never meets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from fieldtest.middleware import registry
from fieldtest.middleware.dds.cyclonedds_config import cyclonedds_config_xml
from fieldtest.middleware.dds.settings import LabSettings
from fieldtest.middleware.launch import LabLaunch
from fieldtest.names import ROLE_ENCLAVES

RMW_IMPLEMENTATIONS = {
    "cyclonedds": "rmw_cyclonedds_cpp",
    "fastrtps": "rmw_fastrtps_cpp",
    "zenoh": "rmw_zenoh_cpp",
}
MAX_AUTO_PARTICIPANT_INDEX = 64  # unicast discovery: enough for nodes + bridge + ros2 CLI tools
# The RTPS well-known ports (DDS-RTPS 2.x, 9.6.1.1, its default constants): PB + DG * domain + offset,
# unicast ones + PG * participant index. Fast DDS and CycloneDDS (with a participant index) use them.
RTPS_PORT_BASE, RTPS_DOMAIN_GAIN, RTPS_PARTICIPANT_GAIN = 7400, 250, 2
RTPS_OFFSETS = {"discovery_multicast": 0, "user_multicast": 1, "discovery_unicast": 10, "user_unicast": 11}


def rtps_port_ranges(
    domain_id: int, max_participant_index: int = MAX_AUTO_PARTICIPANT_INDEX
) -> dict[str, range]:
    """UDP ports a firewall must pass for one DDS domain: the two multicast ports, and the unicast
    ports of participant indices 0..max_participant_index (discovery and user data interleave)."""
    base = RTPS_PORT_BASE + RTPS_DOMAIN_GAIN * domain_id
    last = base + RTPS_OFFSETS["user_unicast"] + RTPS_PARTICIPANT_GAIN * max_participant_index
    return {
        "multicast": range(
            base + RTPS_OFFSETS["discovery_multicast"], base + RTPS_OFFSETS["user_multicast"] + 1
        ),
        "unicast": range(base + RTPS_OFFSETS["discovery_unicast"], last + 1),
    }


LOCAL_PEER = "127.0.0.1"  # rmw_cyclonedds' own LOCALHOST range uses a loopback peer the same way


@dataclass
class RosEnvironment:
    """Variables to set and to remove for every ROS process of one side."""

    set: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    cyclonedds_xml: str | None = None  # written to a file that CYCLONEDDS_URI points at
    fastdds_xml: str | None = None  # written to a file that FASTRTPS/FASTDDS_DEFAULT_PROFILES_FILE point at
    notes: list[str] = field(default_factory=list)

    def apply(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` (e.g. os.environ) with this environment applied."""
        env = {k: v for k, v in base.items() if k not in self.unset}
        env.update(self.set)
        return env


def rmw_implementation(cfg: LabLaunch) -> str:
    return RMW_IMPLEMENTATIONS[registry.get(cfg.middleware).lab_node_rmw(cfg.dds)]


def dds_security_enabled(cfg: LabLaunch) -> bool:
    """DDS Security (SROS2) applies where the DDS graph itself crosses machines: plain DDS only."""
    return cfg.security != "none" and registry.get(cfg.middleware).family == "dds"


def node_enclave(cfg: LabLaunch) -> str | None:
    return ROLE_ENCLAVES[cfg.role] if dds_security_enabled(cfg) else None


def ros_environment(
    cfg: LabLaunch, cyclonedds_path: str | Path | None = None, fastdds_path: str | Path | None = None
) -> RosEnvironment:
    """The environment for ``cfg``; the caller writes ``cyclonedds_xml`` / ``fastdds_xml`` to the paths."""
    env = RosEnvironment()
    env.set["ROS_DOMAIN_ID"] = str(cfg.domain_id)
    env.set["RMW_IMPLEMENTATION"] = rmw_implementation(cfg)
    _discovery_scope(cfg, env)
    rmw = registry.get(cfg.middleware).lab_node_rmw(cfg.dds)
    if rmw == "cyclonedds":
        xml = cyclonedds_xml(cfg)
        if xml is not None:
            env.cyclonedds_xml = xml
            if cyclonedds_path is None:
                env.notes.append(
                    "CycloneDDS configuration generated but no path given: CYCLONEDDS_URI not set"
                )
            else:
                env.set["CYCLONEDDS_URI"] = f"file://{Path(cyclonedds_path).absolute()}"
        else:
            # The TurtleBot 4 exports its own CYCLONEDDS_URI (turtlebot4_setup etc/turtlebot4/setup.bash:
            # cyclonedds_rpi.xml pins wlan0): the kit's defaults must not inherit it.
            env.unset.append("CYCLONEDDS_URI")
    elif rmw == "fastrtps":
        _fastdds_profile(cfg, env, fastdds_path)
    if dds_security_enabled(cfg):
        env.set.update(
            {
                "ROS_SECURITY_KEYSTORE": str(Path(cfg.keystore).expanduser().absolute()),
                "ROS_SECURITY_ENABLE": "true",
                "ROS_SECURITY_STRATEGY": "Enforce",
            }
        )
    else:
        env.unset += ["ROS_SECURITY_ENABLE", "ROS_SECURITY_KEYSTORE", "ROS_SECURITY_STRATEGY"]
    return env


LOOPBACK = "127.0.0.1"


def _fastdds_profile(cfg: LabLaunch, env: RosEnvironment, path: str | Path | None) -> None:
    if cfg.host_address == cfg.robot_address == LOOPBACK and path is not None:
        env.fastdds_xml = fastdds_profile_xml(LOOPBACK)
        uri = str(Path(path).absolute())
        # Fast DDS 2.x (Humble, Jazzy) reads the first name, 3.x (Kilted) the second
        env.set["FASTRTPS_DEFAULT_PROFILES_FILE"] = env.set["FASTDDS_DEFAULT_PROFILES_FILE"] = uri
    elif cfg.network_interface or cfg.base_interface:
        env.notes.append(
            "Fast DDS: interface pinning is not generated; use a Fast DDS XML profile (lab guide)"
        )


def fastdds_profile_xml(address: str) -> str:
    """A default participant profile with one UDPv4 transport on ``address`` and no builtin ones
    (Fast DDS XML profiles: transport_descriptors, userTransports, useBuiltinTransports)."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- fieldtest (generated): Fast DDS on {escape(address)} only, so CycloneDDS peers there meet it -->
<profiles xmlns="http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles">
  <transport_descriptors>
    <transport_descriptor>
      <transport_id>fieldtest_udpv4</transport_id>
      <type>UDPv4</type>
      <interfaceWhiteList><address>{escape(address)}</address></interfaceWhiteList>
    </transport_descriptor>
  </transport_descriptors>
  <participant profile_name="fieldtest_participant" is_default_profile="true">
    <rtps>
      <userTransports><transport_id>fieldtest_udpv4</transport_id></userTransports>
      <useBuiltinTransports>false</useBuiltinTransports>
    </rtps>
  </participant>
</profiles>
"""


def dds_stays_on_machine(cfg: LabLaunch) -> bool:
    """Whether DDS stays on the machine (loopback): bridged, unless the robot must reach its base."""
    if not registry.get(cfg.middleware).lab_bridged():
        return registry.get(
            cfg.middleware
        ).lab_local_only()  # rmw_zenoh: no DDS at all, the routers link the machines
    return not (cfg.role == "robot" and cfg.base_interface)


def _discovery_scope(cfg: LabLaunch, env: RosEnvironment) -> None:
    local = dds_stays_on_machine(cfg)
    if cfg.ros_distro == "humble":
        env.set["ROS_LOCALHOST_ONLY"] = "1" if local else "0"
        env.unset.append("ROS_AUTOMATIC_DISCOVERY_RANGE")
        return
    env.unset += ["ROS_LOCALHOST_ONLY", "ROS_STATIC_PEERS"]
    if registry.get(cfg.middleware).lab_node_rmw(cfg.dds) == "zenoh":
        return  # discovery is the router's business; the variables would be ignored
    if local:
        env.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    elif _peers(cfg):
        env.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SUBNET"
        env.set["ROS_STATIC_PEERS"] = ";".join(_peers(cfg))
        env.unset.remove("ROS_STATIC_PEERS")
    else:
        env.set["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SUBNET"


def _interfaces(cfg: LabLaunch) -> list[str]:
    return list(dict.fromkeys(_interface_choice(cfg)))  # CycloneDDS refuses an interface named twice


def _interface_choice(cfg: LabLaunch) -> list[str]:
    if registry.get(cfg.middleware).lab_bridged():
        # Only the robot pins an interface in bridged mode: its link to the base. The bridge and the
        # nodes on the Pi reach each other over the same interface (local delivery); loopback is
        # not added because CycloneDDS then disables multicast, and the base is found by multicast.
        return [cfg.base_interface] if cfg.role == "robot" and cfg.base_interface else []
    names = [cfg.network_interface] if cfg.network_interface else []
    if cfg.role == "robot" and cfg.base_interface:
        names.append(cfg.base_interface)
    return names


def _peers(cfg: LabLaunch) -> list[str]:
    """The static unicast discovery peers of ``dds_peers:=``."""
    return cfg.lab_settings(LabSettings).peers


def unicast_peers(cfg: LabLaunch) -> list[str]:
    """The given peers plus this machine's loopback: with multicast off, two processes on one
    machine (recorder and driver, bridge and node) otherwise never discover each other."""
    return list(dict.fromkeys([*_peers(cfg), LOCAL_PEER]))


def _cyclonedds_body(cfg: LabLaunch) -> str | None:
    interfaces = _interfaces(cfg)
    if not interfaces and not _peers(cfg):
        return None
    # Multicast for discovery only, unless static peers replace it; loopback has no multicast.
    return cyclonedds_config_xml(
        interface_names=interfaces,
        allow_multicast="false" if _peers(cfg) else "spdp",
        peers=unicast_peers(cfg) if _peers(cfg) else (),
        max_participant_index=MAX_AUTO_PARTICIPANT_INDEX,
    )


def bridge_cyclonedds_uri(cfg: LabLaunch) -> str:
    """CYCLONEDDS_URI (inline) for a bridge on this side, CycloneDDS inside whatever RMW the nodes
    run: the settings CycloneDDS nodes would get here, CycloneDDS's defaults where those are none;
    never the login's own (a TurtleBot 4 exports cyclonedds_rpi.xml, pinned to wlan0, which would
    put the bridge's discovery on the Wi-Fi)."""
    return _cyclonedds_body(cfg) or cyclonedds_config_xml(allow_multicast="true")


def cyclonedds_xml(cfg: LabLaunch) -> str | None:
    """CycloneDDS (0.10, as in Humble and Jazzy) configuration, or None when the defaults fit."""
    body = _cyclonedds_body(cfg)
    if body is None:
        return None
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<!-- generated by fieldtest.middleware.dds.lab for the "
        f"{escape(cfg.role)} side, middleware {escape(cfg.middleware)} -->\n{body}\n"
    )


def robot_dds_off_the_network(cfg: LabLaunch) -> str:
    """CycloneDDS uses exactly the interfaces its config lists: base_interface alone would pin the
    robot's DDS to the USB link to the base, where it never meets the host."""
    if (
        cfg.role != "robot"
        or not registry.get(cfg.middleware).lab_dds_crosses()
        or registry.get(cfg.middleware).lab_node_rmw(cfg.dds) != "cyclonedds"
    ):
        return ""
    if not cfg.base_interface or cfg.network_interface:
        return ""
    return (
        f"network_interface: base_interface:={cfg.base_interface} without network_interface pins the "
        f"robot's CycloneDDS to {cfg.base_interface} only, off the host's network; add "
        "network_interface:=wlan0 (the Pi's Wi-Fi)"
    )
