"""``Middleware``: what one middleware declares, in one object (the registry's extension point).

A family module (``dds``, ``zenoh``, ``mqtt``, ``rmw_zenoh``) subclasses it once per name and
overrides what differs; the callers (runner, campaign, lab) ask ``fieldtest.middleware.registry``
instead of comparing names. Like evo's ``Metric`` base class: plain attributes for the facts, methods
for what needs the libraries, each importing its transport only when called (the middleware
libraries are optional per machine: the lab's ROS 2 nodes have no cyclonedds binding).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from fieldtest.catalog import MiddlewareName, catalog_entry
from fieldtest.linkconfig import Role, TransportConfig

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch, SideProcess
    from fieldtest.procs import ManagedProcess
    from fieldtest.security.keystore import KeystoreOptions, Validity
    from fieldtest.security.securitysettings import SecuritySetting
    from fieldtest.transport.base import Transport


class Middleware:
    """One middleware. Subclasses set ``name`` and override the rest where it differs."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    # The setting ``security: on`` picks in a campaign (the seed study's "security on").
    secure_default: ClassVar[str] = "mtls-acl"
    # Its own process in a twin trial ("router" / "broker"): log name and CPU figure in trial.yaml.
    infra_process: ClassVar[str | None] = None
    # The emulated-network node that process runs in ("host": beside the host, no node of its own).
    infra_node: ClassVar[str] = "host"
    # Lab: the RMW of every node ("cyclonedds", "fastrtps", "zenoh"; None: the side's ``dds:=``
    # choice) and the bridge that carries the host-robot hop (None: the RMW itself crosses).
    lab_rmw: ClassVar[str | None] = None
    lab_bridge: ClassVar[str | None] = None
    # Whether the lab RMW is a DDS one (a node that talks to the Create 3 needs DDS; rmw_zenoh is not)
    lab_rmw_speaks_dds: ClassVar[bool] = True
    # Where a lab trial's clock-offset probes travel by default: over the middleware ("link"), or
    # in plain UDP ("udp") where the link distorts the offset (fieldtest.labrun.nodelogic.udpclock)
    lab_clock_source: ClassVar[str] = "link"
    lab_bridge_mode: ClassVar[str] = ""  # zenoh-bridge-ros2dds: "peer" or "client" (of the router)
    # What a one-machine rehearsal runs instead of the lab's program (rehearsal_side_process), if anything
    rehearsal_note: ClassVar[str] = ""
    # Secured by its own means (any setting but "none" turns it on) instead of a kit setting.
    own_security: ClassVar[bool] = False
    # The kit security settings it takes (fieldtest.security.securitysettings), from its family's security.py.
    security_settings: ClassVar[tuple[str, ...]] = ()
    # The Python library its twin transport imports (None: no twin transport), e.g. for a lab perf
    # relay's check that the robot's Python has it.
    transport_library: ClassVar[str | None] = None
    # A module whose ``library()`` builds and loads the compiled helper its twin transport drives
    # (None: none), e.g. for a lab perf relay's check that the robot can build and load it.
    transport_helper: ClassVar[str | None] = None
    # A module whose ``missing_security_plugins()`` names the security plugin libraries its
    # ``transport_library`` cannot load ([] when it loads them all; None: nothing to check), e.g.
    # for a lab perf relay's check that the robot's binding can run a secured row.
    security_plugin_check: ClassVar[str | None] = None
    # How many receivers of one topic its twin transport links (None: any number).
    max_receivers: ClassVar[int | None] = None
    # The largest payload in bytes its twin transport carries as the kit configures it (None: no
    # limit checked), e.g. for a perf row's refusal of a message it cannot carry.
    max_payload: ClassVar[int | None] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def catalog(self) -> MiddlewareName:
        return catalog_entry(self.name)

    @property
    def family(self) -> str:
        return self.catalog.family

    @property
    def twin(self) -> bool:
        return self.catalog.twin

    # ---- security

    def security_setting(self, name: str) -> SecuritySetting:
        """The kit setting ``name``; SecuritySettingError (one line) unless this middleware takes it."""
        from fieldtest.security.securitysettings import require_setting

        return require_setting(name, self.name, self.security_settings)

    def tls_listeners(self, config: TransportConfig) -> list[tuple[str, str]]:
        """(TLS identity, address) of every process that accepts TLS connections (its certificate
        must name the address): the catalog's listener, if any."""
        listener = self.catalog.listener
        return [(listener[0], getattr(config, listener[1]))] if listener else []

    def keystore_material(self, root: Path, options: KeystoreOptions, validity: Validity) -> None:
        """Write what this middleware needs in a kit keystore beyond the kit's enclaves, governance
        and TLS files (``fieldtest.security.keystore.create_keystore`` calls it): nothing by default."""
        return None

    def keystore_share(self, keystore: Path, enclaves: tuple[str, ...]) -> list[str]:
        """What of this middleware's own keystore material a machine whose processes run as the kit
        ``enclaves`` needs (paths relative to the keystore, files or folders), for its share
        (``fieldtest.security.machineshare.export_machine``): nothing by default."""
        return []

    # ---- twin

    def emulated_nodes(self) -> list[str]:
        """Network nodes of its own besides host, robot and mocap."""
        return [] if self.infra_node == "host" else [self.infra_node]

    def twin_defaults(self, config: TransportConfig, fields_set: set[str]) -> TransportConfig:
        """``config`` with this middleware's twin defaults for fields the request did not set."""
        return config

    def bridged(self, config: TransportConfig) -> bool:
        """Whether the twin runs the lab's bridges for this config (then they replace the infra)."""
        return False

    def bridge_missing(self) -> str:
        """Why the lab's bridges cannot run here (not built), or "" when they can or there are none."""
        return ""

    def unbridged(self, config: TransportConfig) -> TransportConfig:
        """``config`` on this middleware's own path, without the lab's bridges."""
        return config

    def dds_domain_offsets(self, config: TransportConfig) -> tuple[int, ...]:
        """The DDS domains a twin trial holds, as offsets from its own (bridged Zenoh: the robot
        side's domain too)."""
        return (0,)

    def twin_side_processes(
        self, config: TransportConfig, cmd_type: str, config_dir: Path, robot_traffic: str = "none"
    ) -> tuple[list[tuple[str, SideProcess]], dict[str, str]]:
        """The lab's own processes a twin trial runs on this middleware's path, each with the emulated
        node it runs on, in start order (their config files written to ``config_dir``; they also carry
        the ``robot_traffic`` preset's topics), and the environment of the twin's host and robot.
        Empty where the twin runs none."""
        return [], {}

    def open_transport(self, config: TransportConfig, role: Role) -> Transport:
        """Join the link as ``role``, with ``config.security`` applied (security hands the transport
        its fragment; a process whose own credentials are broken refuses to start)."""
        raise NotImplementedError(f"middleware {self.name!r} has no transport in the twin (lab only)")

    def infrastructure(
        self,
        config: TransportConfig,
        workdir: str | Path,
        *,
        prefix: list[str] | None = None,
        realtime: bool = False,
    ) -> ManagedProcess | None:
        """The router or broker it needs (not started), secured as ``config.security`` says; None if none."""
        return None

    # ---- lab

    def lab_host_starts(self, router_on_host: bool) -> str | None:
        """What the lab's host side starts by default ("router" / "broker"), if anything."""
        return None

    def lab_side_processes(
        self, cfg: LabLaunch, config_dir: Path, *, zenohd: str | None = None
    ) -> list[SideProcess]:
        """The bridges, routers and brokers one lab side starts (config files in ``config_dir``);
        empty where the RMW itself crosses."""
        return []

    def rehearsal_side_process(
        self, proc: SideProcess, cfg: LabLaunch, config_dir: Path, python: str
    ) -> SideProcess | str:
        """``proc`` (one of ``lab_side_processes``) as a one-machine rehearsal runs it: the same name,
        config files and environment, another program where the lab's cannot be installed here
        (``python``: the ROS environment's interpreter); a string says why it cannot run here."""
        return proc

    def rehearsal_machine_process(self, cfg: LabLaunch, log_dir: Path) -> tuple[SideProcess, str] | None:
        """The process of a machine of its own that the lab runs for this side's settings (a separate
        broker), as a one-machine rehearsal starts it (its config files written to ``log_dir``),
        and the text it logs once ready; None where the lab has no such machine."""
        return None

    def rehearsal_problem(self, distro: str, nodes_distro: str, python: str) -> str:
        """Why a one-machine rehearsal of ``distro`` cannot run this middleware here (a program not
        installed; ``nodes_distro``: the distro of the rehearsal's rclpy at ``python``), or ""."""
        return ""

    def lab_bridged(self) -> bool:
        """Whether a bridge carries the lab's host-robot hop (else the RMW itself crosses)."""
        return self.lab_bridge is not None

    def lab_node_rmw(self, dds_choice: str) -> str:
        """The RMW of a lab side's nodes: the middleware's own, else the side's ``dds:=`` choice."""
        return self.lab_rmw or dds_choice

    def lab_dds_crosses(self) -> bool:
        """Whether the lab nodes' own DDS crosses between host and robot (no bridge, a DDS RMW)."""
        return self.lab_rmw_speaks_dds and not self.lab_bridged()

    def lab_node_env(self, cfg: LabLaunch, node: str) -> dict[str, str]:
        """What the kit's ROS node ``node`` needs in its environment on this middleware beyond the
        side's ROS environment (secured rmw_zenoh: its own session config), or {}."""
        return {}

    def lab_launch_problem(self, cfg: LabLaunch) -> str:
        """Why one lab side's launch settings would not work on this middleware (one line naming the
        argument and the fix), or ""."""
        return ""

    def lab_local_only(self) -> bool:
        """Whether each machine's DDS stays on the machine (a bridge carries the hop)."""
        return self.lab_bridged()

    def lab_command_publisher_before_commands(self, cfg: LabLaunch) -> bool:
        """Whether the robot's command subscription matches a publisher (the host node's, or its
        bridge's) before the first command is sent: where it does, the runner's go waits for it."""
        return True
