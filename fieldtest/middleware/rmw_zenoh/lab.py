"""rmw_zenoh's lab side: each side's rmw_zenohd (the robot's connects to the host's)."""

from __future__ import annotations

from fieldtest.middleware import registry
from fieldtest.middleware.launch import LabLaunch, SideProcess
from fieldtest.middleware.zenoh.lab import tcp_locator
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings

# --------------------------------------------------------------------------------------- rmw_zenoh


def rmw_zenoh_router(cfg: LabLaunch) -> tuple[list[str], dict[str, str]]:
    """rmw_zenohd of this side: the host's listens, the robot's connects to it (router to router).

    The default router config listens on ``tcp/[::]:7447`` (rmw_zenoh_cpp
    config/DEFAULT_RMW_ZENOH_ROUTER_CONFIG.json5), which fails where IPv6 is off: the host's listens
    on IPv4 explicitly. Secured, the router reads zenoh_security_tools' ``zenohd.json5`` and the
    endpoints are tls/ (ZENOH_CONFIG_OVERRIDE is applied on top of the file)."""
    env: dict[str, str] = {}
    scheme = "tcp"
    if rmw_zenoh_security_enabled(cfg):
        from fieldtest.middleware.rmw_zenoh.security import router_config

        env["ZENOH_ROUTER_CONFIG_URI"] = str(router_config(cfg.keystore))
        scheme = "tls"
    if cfg.role == "robot":
        endpoint = tcp_locator(cfg.host_address, cfg.settings(ZenohSettings).port).replace(
            "tcp/", f"{scheme}/", 1
        )
        env["ZENOH_CONFIG_OVERRIDE"] = f'connect/endpoints=["{endpoint}"]'
    else:
        endpoint = tcp_locator("0.0.0.0", cfg.settings(ZenohSettings).port).replace("tcp/", f"{scheme}/", 1)
        env["ZENOH_CONFIG_OVERRIDE"] = f'listen/endpoints=["{endpoint}"]'
    return ["ros2", "run", "rmw_zenoh_cpp", "rmw_zenohd"], env


def rmw_zenoh_security_enabled(cfg: LabLaunch) -> bool:
    return cfg.security != "none" and registry.get(cfg.middleware).lab_node_rmw(cfg.dds) == "zenoh"


def node_session_env(cfg: LabLaunch, node: str) -> dict[str, str]:
    """Secured rmw_zenoh: the node's own session config from zenoh_security_tools."""
    if not rmw_zenoh_security_enabled(cfg):
        return {}
    from fieldtest.middleware.rmw_zenoh.security import session_config

    return {"ZENOH_SESSION_CONFIG_URI": str(session_config(cfg.keystore, node))}


def lab_side_processes(cfg: LabLaunch) -> list[SideProcess]:
    """rmw_zenohd: always on the robot, on the host where it runs the router."""
    if not (cfg.start_router or cfg.role == "robot"):
        return []
    argv, env = rmw_zenoh_router(cfg)
    return [SideProcess("rmw_zenohd", argv, env, {})]
