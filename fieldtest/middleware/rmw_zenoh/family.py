"""rmw_zenoh (lab only): every node on rmw_zenoh_cpp, no bridge; each side runs rmw_zenohd, the
robot's connects to the host's. Secured by per-node Zenoh session configs made from the SROS2
keystore (``fieldtest.middleware.rmw_zenoh.security``), not by a kit security setting."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.middleware.declaration import Middleware

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch, SideProcess
    from fieldtest.security.keystore import KeystoreOptions, Validity


class RmwZenoh(Middleware):
    name = "rmw-zenoh"
    summary = "every lab node on rmw_zenoh_cpp (lab only; the Create 3 itself still speaks DDS)"
    lab_rmw = "zenoh"
    lab_rmw_speaks_dds = False
    own_security = True

    def keystore_material(self, root: Path, options: KeystoreOptions, validity: Validity) -> None:
        from fieldtest.middleware.rmw_zenoh.keystorematerial import write_keystore_material

        write_keystore_material(root, options, validity)

    def keystore_share(self, keystore: Path, enclaves: tuple[str, ...]) -> list[str]:
        from fieldtest.middleware.rmw_zenoh.keystorematerial import machine_share_paths

        return machine_share_paths(keystore, enclaves)

    def lab_host_starts(self, router_on_host: bool) -> str | None:
        return "router"  # rmw_zenohd; the robot's connects to it

    def lab_side_processes(
        self, cfg: LabLaunch, config_dir: Path, *, zenohd: str | None = None
    ) -> list[SideProcess]:
        from fieldtest.middleware.rmw_zenoh.lab import lab_side_processes

        return lab_side_processes(cfg)

    def lab_node_env(self, cfg: LabLaunch, node: str) -> dict[str, str]:
        from fieldtest.middleware.rmw_zenoh.lab import node_session_env

        return node_session_env(cfg, node)

    def lab_launch_problem(self, cfg: LabLaunch) -> str:
        """The Create 3 (on Jazzy create3_republisher too) speaks DDS only, and the link monitor's
        relay is on the process' one RMW, so no command reaches the base: only a dry run, which
        drives nothing, is meaningful."""
        if cfg.dry_run:
            return ""
        return (
            f"middleware: {cfg.middleware} puts the kit's nodes, the relay included, on "
            "rmw_zenoh_cpp, which the Create 3 (DDS only) never hears, so the base would stand "
            "still; use dry_run:=true to exercise the link alone, or a bridged Zenoh case "
            "(zenoh-peer, zenoh-router), whose bridge republishes cmd_vel into the robot's DDS"
        )

    def rehearsal_side_process(
        self, proc: SideProcess, cfg: LabLaunch, config_dir: Path, python: str
    ) -> SideProcess | str:
        return f"{proc.name} needs ROS 2 packages that are not among the wheels"

    def lab_local_only(self) -> bool:
        return True  # rmw_zenoh does not use DDS at all; the routers link the machines


MIDDLEWARES = (RmwZenoh(),)
