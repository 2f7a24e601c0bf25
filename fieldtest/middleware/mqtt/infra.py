"""Infrastructure processes of the middlewares: a Zenoh router and a Mosquitto MQTT broker.

Both run as separate OS processes, started and always stopped by a context manager:

    with ZenohRouter(config):              # router at tcp/<router_address>:<zenoh_port>
        ...
    with MosquittoBroker(config, workdir):  # broker at mqtt_broker_address(config):<mqtt_port>
        ...

Secured, they take the fragments security makes (``overrides``, ``listener_lines``): build them
through ``fieldtest.middleware.registry.infrastructure``, which does.

``prefix`` (e.g. ``["ip", "netns", "exec", "ns1"]``) runs the process inside a network namespace;
readiness is then read from the process' own log, since the port may be unreachable from here.

Command line (a router on its own machine or namespace):
    python -m fieldtest.middleware.mqtt.infra zenoh-router --address 10.0.0.1 --port 7447
    python -m fieldtest.middleware.mqtt.infra mosquitto --address 10.0.0.1 --port 1883 --workdir /tmp/mq
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import shutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fieldtest.catalog import catalog_entry
from fieldtest.names import MQTT_PORT, ZENOH_PORT
from fieldtest.procs import DEFAULT_START_TIMEOUT_S, ManagedProcess, ProcessStartError, signals_set
from fieldtest.transport.base import TransportConfig, require_fragment

MOSQUITTO = "/usr/sbin/mosquitto"
ZENOH_ROUTER_READY = "zenoh-router ready"
MOSQUITTO_READY = " running"  # "mosquitto version 2.0.11 running", logged once the listeners are open


class BrokerError(ProcessStartError):
    """A router/broker process could not be started."""


# ----------------------------------------------------------------------------------------------- Zenoh router


def router_session_config(address: str, port: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Session config of a Zenoh router listening on tcp/<address>:<port>, no scouting (the twin's
    router, and the lab's when zenohd is not installed: one config for both)."""
    from fieldtest.middleware.zenoh.transport import deep_merge, tcp_endpoint

    session_config = {
        "mode": "router",
        "listen": {"endpoints": [tcp_endpoint(address, port)]},
        "connect": {"endpoints": []},
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        # off (a router's default is on): a stamp made here would stop the robot's session from
        # stamping the arrival (fieldtest.middleware.zenoh.transport)
        "timestamping": {"enabled": False},
    }
    return deep_merge(session_config, overrides) if overrides else session_config


def run_zenoh_router(
    config: TransportConfig, stop: threading.Event | None = None, overrides: dict[str, Any] | None = None
) -> None:
    """Run a Zenoh router until ``stop`` is set (or SIGTERM/SIGINT when run as a main program)."""
    from fieldtest.middleware.zenoh.transport import open_session

    stop = stop or threading.Event()
    session_config = router_session_config(config.router_address, config.zenoh_port, overrides)
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
        "fieldtest.middleware.mqtt.infra",
        "zenoh-router",
        "--address",
        address,
        "--port",
        str(port),
    ]
    if overrides:
        argv += ["--overrides-json", json.dumps(overrides)]
    return argv


class ZenohRouter(ManagedProcess):
    """A Zenoh router as a subprocess at tcp/<router_address>:<zenoh_port>.

    ``overrides`` are deep-merged into its config; a secured ``config`` needs them (the router's
    TLS identity and access control, tls/<router_address>:<zenoh_port>, made by security).
    """

    start_error = BrokerError

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
            [*prefix, *zenoh_router_command(config.router_address, config.zenoh_port, overrides)],
            address=config.router_address,
            port=config.zenoh_port,
            ready_text=ZENOH_ROUTER_READY,
            check_port=not prefix,
            start_timeout_s=start_timeout_s,
            realtime=realtime,
        )


# ----------------------------------------------------------------------------------------------- Mosquitto


def mqtt_broker_address(config: TransportConfig) -> str:
    """Where the broker runs: beside the host ("mqtt-local-broker") or on its own ("mqtt-broker")."""
    entry = catalog_entry(config.middleware)
    if entry.family == "mqtt" and entry.listener:
        return getattr(config, entry.listener[1])
    raise BrokerError(f"middleware {config.middleware!r} is not an MQTT middleware")


def plain_listener_lines(address: str, port: int) -> list[str]:
    """An anonymous listener (security "none"); security writes the TLS one."""
    return [f"listener {port} {address}", "allow_anonymous true"]


def mosquitto_conf(
    listener_lines: Sequence[str],
    *,
    run_as: str | None = None,
    comment: str = "",
    per_listener_settings: bool = False,
) -> str:
    """A complete mosquitto.conf (2.x) around ``listener_lines``, for the twin and the lab alike: no
    persistence, log to stderr (unbuffered, so readiness is visible), no Nagle, no QoS 1 throttling.

    ``run_as`` is the account Mosquitto keeps when started as root (its default, ``mosquitto``,
    cannot read a 0600 broker key); ignored when started by another user. With
    ``per_listener_settings`` each listener's own ``allow_anonymous``/``acl_file`` follow its
    ``listener`` line (a plain and a TLS listener in one broker).
    """
    lines = [
        f"# {comment or 'written by fieldtest.middleware.mqtt.infra'}",
        *([f"user {run_as}"] if run_as else []),
        f"per_listener_settings {'true' if per_listener_settings else 'false'}",
        "persistence false",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
        # Nagle's algorithm holds small messages back up to ~40 ms: it would dominate every latency.
        "set_tcp_nodelay true",
        "max_inflight_messages 0",  # no throttling of QoS 1 flows (mqtt_client's max_inflight is 65535)
        *listener_lines,
    ]
    return "\n".join(lines) + "\n"


def find_mosquitto(binary: str = MOSQUITTO) -> str:
    path = binary if os.path.isabs(binary) else shutil.which(binary)
    if not path or not os.access(path, os.X_OK):
        raise BrokerError(
            f"{binary}: Mosquitto is not installed (apt install mosquitto, or run tools/install.sh)"
        )
    return path


class MosquittoBroker(ManagedProcess):
    """Debian's Mosquitto as a subprocess, configured by ``<workdir>/mosquitto.conf``.

    ``listener_lines`` default to a plain listener; a secured ``config`` needs them (the TLS
    listener and ACL security writes). ``run_as`` (see ``mosquitto_conf``) defaults to the current
    user for a TLS listener, whose key and ACL only this user may read.
    """

    start_error = BrokerError

    def __init__(
        self,
        config: TransportConfig,
        workdir: str | Path,
        *,
        prefix: Sequence[str] = (),
        binary: str = MOSQUITTO,
        listener_lines: Sequence[str] | None = None,
        run_as: str | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        realtime: bool = False,
    ):
        require_fragment(config, listener_lines, "Mosquitto TLS listener")
        address = mqtt_broker_address(config)
        self.conf_path = Path(workdir) / "mosquitto.conf"
        lines = (
            listener_lines if listener_lines is not None else plain_listener_lines(address, config.mqtt_port)
        )
        if run_as is None and listener_lines is not None:
            run_as = getpass.getuser()
        self.conf_text = mosquitto_conf(lines, run_as=run_as)
        self.binary = binary
        self.prefix = list(prefix)
        super().__init__(
            "mosquitto",
            [*prefix, binary, "-c", str(self.conf_path)],
            address=address,
            port=config.mqtt_port,
            ready_text=MOSQUITTO_READY,
            check_port=not prefix,
            start_timeout_s=start_timeout_s,
            realtime=realtime,
        )

    def start(self) -> None:
        self.argv = [*self.prefix, find_mosquitto(self.binary), "-c", str(self.conf_path)]
        self.conf_path.parent.mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(self.conf_text)
        super().start()


# ----------------------------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fieldtest.middleware.mqtt.infra", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="kind", required=True)
    router = sub.add_parser("zenoh-router", help="run a Zenoh router until SIGTERM/SIGINT")
    router.add_argument("--address", default="0.0.0.0")
    router.add_argument("--port", type=int, default=ZENOH_PORT)
    router.add_argument("--overrides-json", default="", help="JSON object deep-merged into the router config")
    mosq = sub.add_parser("mosquitto", help="write mosquitto.conf and run Mosquitto in the foreground")
    mosq.add_argument("--address", default="0.0.0.0")
    mosq.add_argument("--port", type=int, default=MQTT_PORT)
    mosq.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)

    if args.kind == "zenoh-router":
        config = TransportConfig(middleware="zenoh-router", router_address=args.address, zenoh_port=args.port)
        overrides = json.loads(args.overrides_json) if args.overrides_json else None
        run_zenoh_router(config, overrides=overrides)
        return 0
    conf_path = Path(args.workdir) / "mosquitto.conf"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text(mosquitto_conf(plain_listener_lines(args.address, args.port)))
    binary = find_mosquitto()
    os.execv(binary, [binary, "-c", str(conf_path)])
    return 1  # not reached


if __name__ == "__main__":
    from fieldtest.middleware.zenoh.transport import ZenohTransportError

    try:
        sys.exit(main())
    except (BrokerError, ZenohTransportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
