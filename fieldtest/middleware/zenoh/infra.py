"""Zenoh's infrastructure process: a Zenoh router, a separate OS process started and always stopped
by a context manager:

    with ZenohRouter(config):              # router at tcp/<router_address>:<zenoh.port>
        ...

Secured, it takes the overrides security makes: build it through
``fieldtest.middleware.registry.infrastructure``, which does. ``prefix`` (e.g. ``["ip", "netns",
"exec", "ns1"]``) runs it inside a network namespace; readiness is then read from its own log.

Command line (a router on its own machine or namespace):
    python -m fieldtest.middleware.zenoh.infra --address 10.0.0.1 --port 7447
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from collections.abc import Sequence
from typing import Any

from fieldtest.middleware.zenoh.settings import ZENOH_PORT, Settings
from fieldtest.procs import DEFAULT_START_TIMEOUT_S, ManagedProcess, ProcessStartError, signals_set
from fieldtest.transport.base import TransportConfig, require_fragment

ZENOH_ROUTER_READY = "zenoh-router ready"


class RouterError(ProcessStartError):
    """The router process could not be started."""


def router_session_config(address: str, port: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Session config of a Zenoh router listening on tcp/<address>:<port>, no scouting (the twin's
    router, and the lab's when zenohd is not installed: one config for both)."""
    from fieldtest.middleware.zenoh.transport import NO_SHARED_MEMORY, deep_merge, tcp_endpoint

    session_config = {
        "mode": "router",
        "listen": {"endpoints": [tcp_endpoint(address, port)]},
        "connect": {"endpoints": []},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        # off (a router's default is on): a stamp made here would stop the robot's session from
        # stamping the arrival (fieldtest.middleware.zenoh.transport)
        "timestamping": {"enabled": False},
        "transport": NO_SHARED_MEMORY,  # a router on the same machine as its clients, too
    }
    return deep_merge(session_config, overrides) if overrides else session_config


def run_zenoh_router(
    config: TransportConfig, stop: threading.Event | None = None, overrides: dict[str, Any] | None = None
) -> None:
    """Run a Zenoh router until ``stop`` is set (or SIGTERM/SIGINT when run as a main program)."""
    from fieldtest.middleware.zenoh.transport import open_session

    stop = stop or threading.Event()
    session_config = router_session_config(config.router_address, config.settings(Settings).port, overrides)
    with contextlib.ExitStack() as on_exit:
        if threading.current_thread() is threading.main_thread():
            on_exit.enter_context(signals_set(stop))
        session = open_session(session_config)
        on_exit.callback(session.close)
        print(
            f"{ZENOH_ROUTER_READY} {session_config['listen']['endpoints'][0]} zid={session.zid()}", flush=True
        )
        stop.wait()


def zenoh_router_command(
    address: str, port: int, overrides: dict[str, Any] | None = None, *, python: str = sys.executable
) -> list[str]:
    """The kit's router process (``run_zenoh_router``) as a command line; the lab runs it with the
    machine's ``python3`` where zenohd is not installed."""
    argv = [
        python,
        "-m",
        "fieldtest.middleware.zenoh.infra",
        "--address",
        address,
        "--port",
        str(port),
    ]
    if overrides:
        argv += ["--overrides-json", json.dumps(overrides)]
    return argv


class ZenohRouter(ManagedProcess):
    """A Zenoh router as a subprocess at tcp/<router_address>:<zenoh.port>.

    ``overrides`` are deep-merged into its config; a secured ``config`` needs them (the router's
    TLS identity and access control, tls/<router_address>:<zenoh.port>, made by security).
    """

    start_error = RouterError

    def __init__(
        self,
        config: TransportConfig,
        *,
        prefix: Sequence[str] = (),
        overrides: dict[str, Any] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        require_fragment(config, overrides, "Zenoh router security overrides")
        super().__init__(
            "zenoh router",
            [
                *prefix,
                *zenoh_router_command(config.router_address, config.settings(Settings).port, overrides),
            ],
            address=config.router_address,
            port=config.settings(Settings).port,
            ready_text=ZENOH_ROUTER_READY,
            check_port=not prefix,
            start_timeout_s=start_timeout_s,
            realtime=realtime,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.middleware.zenoh.infra",
        description="run a Zenoh router until SIGTERM/SIGINT",
    )
    parser.add_argument("--address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=ZENOH_PORT)
    parser.add_argument("--overrides-json", default="", help="JSON object deep-merged into the router config")
    args = parser.parse_args(argv)
    config = TransportConfig.model_validate(
        {"middleware": "zenoh-router", "router_address": args.address, "zenoh": {"port": args.port}}
    )
    overrides = json.loads(args.overrides_json) if args.overrides_json else None
    run_zenoh_router(config, overrides=overrides)
    return 0


if __name__ == "__main__":
    from fieldtest.middleware.zenoh.transport import ZenohTransportError

    try:
        sys.exit(main())
    except (RouterError, ZenohTransportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
