"""Zenoh transport, wire-compatible with zenoh-bridge-ros2dds.

The bridge maps the ROS topic ``/cmd_vel`` to the key ``cmd_vel`` (the namespace is prepended:
``/tb4/cmd_vel`` -> ``tb4/cmd_vel``) and carries the ROS 2 CDR bytes of the message, including the
4-byte encapsulation header. It publishes RELIABLE topics with congestion control BLOCK and
BEST_EFFORT ones with DROP (its default ``reliable_routes_blocking: true``); so does this module.

Middlewares:
- ``zenoh-peer``: peer to peer over TCP. The robot listens on ``tcp/<robot_address>:<zenoh.port>``,
  the host connects to it. Scouting is off so the link is exactly the one configured.
- ``zenoh-router``: both sides are clients of a router at ``tcp/<router_address>:<zenoh.port>``
  (see ``fieldtest.middleware.zenoh.infra`` for running one).

Arrival stamps: the robot's session has timestamping on, so zenoh's router layer stamps each
sample that comes without one the moment it is decoded from the link, on a Rust thread
(zenoh/src/net/routing/dispatcher/pubsub.rs, ``treat_timestamp``). The Python callback runs only
once it has the GIL, up to milliseconds later in the twin robot; its arrival stamp is moved back
by the stamp's age. The host's session (and the kit's router) leave timestamping off, or their
own stamp would ride on every sample and the robot's would never be made.

The session configuration is a plain dict built by ``zenoh_config`` so security settings can add
``transport.link.tls`` and ``access_control`` blocks: ``open_zenoh`` does so itself from
``config.security`` / ``config.keystore``, or takes them explicitly (``config_overrides=...``).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import zenoh

from fieldtest import rosmsg
from fieldtest.catalog import catalog_entry
from fieldtest.errors import FieldtestError
from fieldtest.middleware.zenoh.settings import Settings
from fieldtest.qos import get_qos
from fieldtest.transport.base import (
    CallbackSubscriber,
    Role,
    StampedPublish,
    TimedCallback,
    TimeSource,
    TransportConfig,
    decoder,
    full_topic,
    require_fragment,
    stamp_and_send,
)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
# Oldest router-layer stamp taken as an arrival: older means the wall clock was stepped meanwhile.
MAX_STAMP_AGE_NS = 2_000_000_000
# Reconnect quickly after a link drop (zenoh's default first retry is after 1 s).
CONNECT_RETRY = {"period_init_ms": 200, "period_max_ms": 1000, "period_increase_factor": 2}


class ZenohTransportError(FieldtestError, RuntimeError):
    """The Zenoh link cannot be set up as configured."""


def zenoh_key(namespace: str, topic: str) -> str:
    """Zenoh key of a ROS topic as zenoh-bridge-ros2dds maps it: ('/tb4', '/cmd_vel') -> 'tb4/cmd_vel'."""
    return full_topic(namespace, topic).lstrip("/")


def tcp_endpoint(address: str, port: int) -> str:
    """Zenoh locator for a TCP address; IPv6 addresses get brackets."""
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"tcp/{host}:{port}"


def congestion_control(qos_name: str) -> zenoh.CongestionControl:
    """BLOCK for a RELIABLE profile, DROP for BEST_EFFORT, as the bridge does (history/depth and
    durability have no Zenoh publisher equivalent and are not applied)."""
    reliable = get_qos(qos_name).reliability == "reliable"
    return zenoh.CongestionControl.BLOCK if reliable else zenoh.CongestionControl.DROP


# Machines share no memory. Zenoh's default (DEFAULT_CONFIG.json5, transport.shared_memory:
# enabled, transport_optimization message_size_threshold 3072) would hand every payload over 3 KB
# to a peer on the same machine through /dev/shm, which every network namespace here shares, so
# large messages would skip the emulated link.
NO_SHARED_MEMORY = {"shared_memory": {"enabled": False}}


def _stamp_age_ns(stamped_ns: int | None, wall_now_ns: int) -> int:
    """A router-layer stamp's age; 0 without one or for one from a stepped wall clock."""
    if stamped_ns is None:
        return 0
    age_ns = wall_now_ns - stamped_ns
    return age_ns if 0 <= age_ns <= MAX_STAMP_AGE_NS else 0


def zenoh_config(
    config: TransportConfig, role: Role, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
) -> dict[str, Any]:
    """Session configuration (JSON5-compatible dict) for ``role`` under ``config.middleware``."""
    entry = catalog_entry(config.middleware)
    if entry.family != "zenoh" or entry.listener is None:
        raise ZenohTransportError(f"middleware {config.middleware!r} is not a Zenoh middleware")
    listener, address_field = entry.listener  # zenoh-peer: the robot listens; zenoh-router: the router
    endpoint = tcp_endpoint(getattr(config, address_field), config.settings(Settings).port)
    if listener == "router":
        mode, listen, connect = "client", [], [endpoint]
    elif listener == role:
        mode, listen, connect = "peer", [endpoint], []
    else:
        mode, listen, connect = "peer", [], [endpoint]
    return {
        "mode": mode,
        "listen": {"endpoints": listen},
        "connect": {
            "endpoints": connect,
            "timeout_ms": int(connect_timeout_s * 1000),
            "exit_on_failure": bool(connect),
            "retry": dict(CONNECT_RETRY),
        },
        "scouting": {"multicast": {"enabled": False}, "gossip": {"enabled": False}},
        "timestamping": {"enabled": role == "robot"},  # arrival stamps (module docstring)
        "transport": NO_SHARED_MEMORY,
    }


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in recursively (overrides win); neither is modified."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def open_session(session_config: dict[str, Any]) -> zenoh.Session:
    """Open a Zenoh session from a config dict; a clear error when the peer/router is unreachable."""
    try:
        return zenoh.open(zenoh.Config.from_json5(json.dumps(session_config)))
    except zenoh.ZError as exc:
        where = session_config.get("connect", {}).get("endpoints") or session_config.get("listen", {}).get(
            "endpoints"
        )
        reason = str(exc).split(" at /")[0]  # drop the Rust source location
        raise ZenohTransportError(
            f"cannot open Zenoh session ({session_config.get('mode')} {where}): {reason}"
        ) from exc


class ZenohTransport(CallbackSubscriber):
    """A Transport over one Zenoh session; ``close()`` closes the session (else the process lingers)."""

    def __init__(self, session: zenoh.Session, config: TransportConfig):
        self.session = session
        self.config = config
        self._publishers: dict[str, zenoh.Publisher] = {}
        self._subscribers: list[zenoh.Subscriber] = []
        self._lock = threading.Lock()
        self._closed = False
        self._own_stamp_id = str(session.zid())  # the id this session's stamps carry

    def own_stamp_ns(self, sample: zenoh.Sample) -> int | None:
        """When this session's router layer stamped ``sample`` on arrival (wall clock, ns), or None
        for a sample stamped elsewhere (by its sender or a router) or not at all."""
        stamp = sample.timestamp
        if stamp is None or str(stamp.get_id()) != self._own_stamp_id:
            return None
        return stamp.get_time_as_ntp64().as_nanos()

    def stamp_age_ns(self, sample: zenoh.Sample, wall_now_ns: int | None = None) -> int:
        """How long before ``wall_now_ns`` (default: now) this session's router layer stamped
        ``sample``; 0 for a sample stamped elsewhere or not at all, or from a stepped wall clock."""
        stamped_ns = self.own_stamp_ns(sample)
        return _stamp_age_ns(stamped_ns, time.time_ns() if wall_now_ns is None else wall_now_ns)

    def key(self, topic: str) -> str:
        return zenoh_key(self.config.namespace, topic)

    def _declared_publisher(self, topic: str) -> zenoh.Publisher:
        key = self.key(topic)
        with self._lock:
            if key not in self._publishers:
                self._publishers[key] = self.session.declare_publisher(
                    key, congestion_control=congestion_control(self.config.qos)
                )
            return self._publishers[key]

    def publisher(self, topic: str, typename: str) -> Callable[[Any], None]:
        zpub = self._declared_publisher(topic)

        def publish(msg: Any) -> None:
            zpub.put(rosmsg.serialize(msg, typename))

        return publish

    def stamped_publisher(
        self, topic: str, typename: str, stamp: rosmsg.TimeField, clock: TimeSource
    ) -> StampedPublish:
        zpub = self._declared_publisher(topic)
        return lambda out: stamp_and_send(out, stamp, clock, zpub.put)

    def _subscribe(
        self, topic: str, typename: str, deliver: TimedCallback, now_ns: Callable[[], int]
    ) -> None:
        key = self.key(topic)
        decode = decoder(typename, deliver, key)

        def on_sample(sample: zenoh.Sample) -> None:
            # The stamp first: reading it calls into the binding, where another thread may take the
            # GIL for milliseconds; then both clocks back to back, so the age is the stamp's alone.
            stamped_ns = self.own_stamp_ns(sample)
            arrival_ns, wall_ns = now_ns(), time.time_ns()
            decode(sample.payload.to_bytes(), arrival_ns - _stamp_age_ns(stamped_ns, wall_ns))

        with self._lock:
            self._subscribers.append(self.session.declare_subscriber(key, on_sample))

    def wait_matched(self, topic: str, timeout_s: float) -> bool:
        """Wait until a remote subscriber matches ``topic``'s publisher; False on timeout.

        Zenoh drops publications nobody has subscribed yet, so a sender that must not lose its
        first messages waits for this.
        """
        zpub = self._declared_publisher(topic)
        deadline = time.monotonic() + timeout_s
        while not zpub.matching_status.matching:  # type: ignore[attr-defined]  # the stub says bool; it is a MatchingStatus
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.session.close()


def open_zenoh(
    config: TransportConfig,
    role: Role,
    *,
    config_overrides: dict[str, Any] | None = None,
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
) -> ZenohTransport:
    """Join the Zenoh link as ``role``. ``config_overrides`` is deep-merged into the session config
    (e.g. TLS under ``transport.link.tls``, an ``access_control`` block).

    A secured ``config`` needs them (mTLS + access control, made by security from the keystore).
    """
    require_fragment(config, config_overrides, "Zenoh security overrides")
    congestion_control(config.qos)  # an unknown QoS name fails here, not at the first publisher
    session_config = zenoh_config(config, role, connect_timeout_s=connect_timeout_s)
    if config_overrides:
        session_config = deep_merge(session_config, config_overrides)
    return ZenohTransport(open_session(session_config), config)
