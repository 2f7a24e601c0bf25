"""The middleware names and the plain facts about them that the lower layers read (no imports).

This is the registry's plain-data half: ``fieldtest.record``, ``fieldtest.analysis`` and
``fieldtest.security`` may read it, since it imports nothing. Each name's behaviour (transport,
infrastructure, security fragments, lab config) is declared in its family module
(``fieldtest.middleware.<family>``); ``fieldtest.middleware.registry`` joins the
two and a test checks that they list the same names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MiddlewareName:
    name: str
    family: str  # "dds", "zenoh", "mqtt" (the security kind and wire form follow it) or "rmw-zenoh"
    twin: bool = True  # the digital twin runs it (False: lab only)
    # The process the others connect to, if any: (TLS identity, TransportConfig address field).
    # Secured, it is the one that accepts TLS connections, so its certificate must name the address.
    listener: tuple[str, str] | None = None


# In report order: the seed study's five cases, then the variants (rmw-zenoh: lab only).
CATALOG: tuple[MiddlewareName, ...] = (
    MiddlewareName("dds", "dds"),
    MiddlewareName("zenoh-peer", "zenoh", listener=("robot", "robot_address")),
    MiddlewareName("zenoh-router", "zenoh", listener=("router", "router_address")),
    MiddlewareName("mqtt-local-broker", "mqtt", listener=("broker", "host_address")),
    MiddlewareName("mqtt-broker", "mqtt", listener=("broker", "broker_address")),
    MiddlewareName("rmw-zenoh", "rmw-zenoh", twin=False),  # every lab node on rmw_zenoh_cpp, no bridge
    MiddlewareName("fastdds", "dds"),  # Fast DDS, the TurtleBot 4's own; lab: rmw_fastrtps_cpp, DDS across
)
_BY_NAME = {entry.name: entry for entry in CATALOG}

TWIN_MIDDLEWARES: tuple[str, ...] = tuple(e.name for e in CATALOG if e.twin)
LAB_MIDDLEWARES: tuple[str, ...] = tuple(e.name for e in CATALOG)


def family(name: str) -> str:
    """The family of a known name ("" for an unknown one)."""
    entry = _BY_NAME.get(name)
    return entry.family if entry else ""


def family_package(family_name: str) -> str:
    """The package that holds family ``family_name`` (``fieldtest.middleware.<name, "-" as "_">``)."""
    return "fieldtest.middleware." + family_name.replace("-", "_")


def catalog_entry(name: str) -> MiddlewareName:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown middleware {name!r} (known: {', '.join(LAB_MIDDLEWARES)})") from None


def in_family(family_name: str, *, twin_only: bool = False) -> tuple[str, ...]:
    return tuple(e.name for e in CATALOG if e.family == family_name and (e.twin or not twin_only))


def report_order(name: str) -> int:
    """Position in ``CATALOG``; unknown names sort last."""
    return LAB_MIDDLEWARES.index(name) if name in _BY_NAME else len(LAB_MIDDLEWARES)
