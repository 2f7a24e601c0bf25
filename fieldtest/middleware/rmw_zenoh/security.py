"""rmw_zenoh's security: the per-node Zenoh session configs and the router config that
``ros2 run zenoh_security_tools generate_configs`` derives from the keystore's rmw_zenoh policy
(written into the keystore by ``fieldtest.middleware.rmw_zenoh.keystorematerial``), and the command that
generates them."""

from __future__ import annotations

from pathlib import Path

from fieldtest.errors import FieldtestError
from fieldtest.middleware.rmw_zenoh.keystorematerial import ROUTER_NODE, generated_dir
from fieldtest.names import RMW_ZENOH_ENCLAVE


class RmwZenohSecurityError(FieldtestError, ValueError):
    """Generated configs missing or unusable; one line naming the file."""


def session_config(keystore: str | Path, node: str) -> Path:
    """Where the lab keeps generate_configs' output for ``node`` (run inside generated_dir)."""
    path = generated_dir(keystore) / f"{node}.json5"
    if not path.is_file():
        raise RmwZenohSecurityError(
            f"{path}: missing; generate the rmw_zenoh security configs first "
            f"(docs/security.md, rmw-zenoh: zenoh_security_tools generate_configs)"
        )
    return path


def router_config(keystore: str | Path) -> Path:
    return session_config(keystore, ROUTER_NODE)


def generate_command(
    keystore: str | Path, domain_id: int, router_default: str, session_default: str
) -> list[str]:
    """``generate_configs`` for the kit's policy; run it with generated_dir() as working directory."""
    folder = generated_dir(keystore)
    enclaves = Path(keystore).expanduser().absolute() / "enclaves" / RMW_ZENOH_ENCLAVE.strip("/")
    return [
        *("ros2", "run", "zenoh_security_tools", "generate_configs"),
        *("--policy", str(folder / "policy.xml")),
        *("--router-config", router_default, "--session-config", session_default),
        *("--ros-domain-id", str(domain_id), "--enclaves", str(enclaves)),
    ]
