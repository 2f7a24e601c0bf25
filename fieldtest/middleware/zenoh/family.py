"""Zenoh: peer to peer (``zenoh-peer``: the robot listens, the host connects) or through a router
(``zenoh-router``: both are clients of it).

Two paths in the twin (``path`` of its settings, fieldtest.middleware.zenoh.settings): "bridge", the lab's path (each side's DDS ->
zenoh-bridge-ros2dds -> Zenoh -> bridge -> DDS; zenohd is then also the router), or "direct", the
kit's processes on Zenoh themselves. Security: mutual TLS + access control (``mtls-acl``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.declaration import Middleware
from fieldtest.middleware.zenoh.security import SETTINGS, config_overrides
from fieldtest.middleware.zenoh.settings import Settings

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch, SideProcess
    from fieldtest.middleware.zenoh.infra import ZenohRouter
    from fieldtest.transport.base import Transport


class _Zenoh(Middleware):
    security_settings = SETTINGS
    lab_bridge = "zenoh-bridge-ros2dds"
    transport_library = "zenoh"
    # the default transport.link.rx.max_message_size (zenoh DEFAULT_CONFIG.json5)
    max_payload = 1 << 30

    def twin_defaults(self, config: TransportConfig, fields_set: set[str]) -> TransportConfig:
        """Twin trials run through the real bridges, as in the lab, unless the request names the path."""
        given = config.settings(Settings).model_fields_set
        return config if "path" in given else config.with_settings(Settings, path="bridge")

    def bridged(self, config: TransportConfig) -> bool:
        return config.settings(Settings).path == "bridge"

    def bridge_missing(self) -> str:
        from fieldtest.middleware.zenoh.bridge import BridgeMissingError, find_bridge

        try:
            find_bridge()
        except BridgeMissingError as exc:
            return str(exc)
        return ""

    def unbridged(self, config: TransportConfig) -> TransportConfig:
        return config.with_settings(Settings, path="direct")

    def dds_domain_offsets(self, config: TransportConfig) -> tuple[int, ...]:
        from fieldtest.middleware.zenoh.bridge import ROBOT_DOMAIN_OFFSET

        return (0, ROBOT_DOMAIN_OFFSET) if self.bridged(config) else (0,)

    def twin_side_processes(
        self, config: TransportConfig, cmd_type: str, config_dir: Path, robot_traffic: str = "none"
    ) -> tuple[list[tuple[str, SideProcess]], dict[str, str]]:
        if not self.bridged(config):
            return [], {}
        from fieldtest.middleware.zenoh.lab import twin_bridge_processes

        return twin_bridge_processes(config, cmd_type, config_dir, robot_traffic)

    def lab_side_processes(
        self, cfg: LabLaunch, config_dir: Path, *, zenohd: str | None = None
    ) -> list[SideProcess]:
        from fieldtest.middleware.zenoh.lab import lab_side_processes

        return lab_side_processes(cfg, config_dir, zenohd=zenohd)

    def rehearsal_side_process(
        self, proc: SideProcess, cfg: LabLaunch, config_dir: Path, python: str
    ) -> SideProcess | str:
        from fieldtest.middleware.zenoh.lab import rehearsal_side_process

        return rehearsal_side_process(proc, cfg, config_dir)

    def rehearsal_problem(self, distro: str, nodes_distro: str, python: str) -> str:
        """zenohd with the ros2dds plugin must be built. (The nodes' distro is the trial's: the
        rehearsal refuses any other before asking, ``fieldtest.labrun.rehearsal.labrehearsal``.)"""
        return self.bridge_missing()

    def open_transport(self, config: TransportConfig, role: Role) -> Transport:
        if self.bridged(config):
            from fieldtest.middleware.dds.transport import open_dds
            from fieldtest.middleware.zenoh.bridge import side_dds_config

            return open_dds(side_dds_config(config, role), role)  # the side's bridge carries it on
        from fieldtest.middleware.zenoh.transport import open_zenoh, zenoh_config

        overrides = None
        if config.security != "none":
            overrides = config_overrides(config, role, zenoh_config(config, role))
        return open_zenoh(config, role, config_overrides=overrides)


class ZenohPeer(_Zenoh):
    name = "zenoh-peer"
    summary = "Zenoh peer to peer (TCP): the robot listens, the host connects"
    max_receivers = 1  # one listener, one connecting peer
    lab_bridge_mode = "peer"


class ZenohViaRouter(_Zenoh):
    name = "zenoh-router"
    summary = "Zenoh through a router: host and robot are its clients"
    infra_process = "router"
    infra_node = "router"
    lab_bridge_mode = "client"

    def lab_host_starts(self, router_on_host: bool) -> str | None:
        return "router" if router_on_host else None

    def infrastructure(
        self,
        config: TransportConfig,
        workdir: str | Path,
        *,
        prefix: list[str] | None = None,
        realtime: bool = False,
    ) -> ZenohRouter:
        from fieldtest.middleware.zenoh import infra

        overrides = None
        if config.security != "none":
            overrides = config_overrides(
                config,
                "router",
                infra.router_session_config(config.router_address, config.settings(Settings).port),
            )
        return infra.ZenohRouter(config, prefix=prefix or (), overrides=overrides, realtime=realtime)


MIDDLEWARES = (ZenohPeer(), ZenohViaRouter())
