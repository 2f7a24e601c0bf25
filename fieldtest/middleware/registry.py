"""The middleware registry: one ``Middleware`` object per name, from the family modules.

    from fieldtest.middleware import registry
    registry.get("zenoh-peer").open_transport(config, "host")
    registry.names()            # what the twin runs, in report order
    registry.names(lab=True)    # plus the lab-only variants

To add a middleware: see docs/architecture.md ("How to add a middleware").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.catalog import LAB_MIDDLEWARES, TWIN_MIDDLEWARES
from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.middleware.dds import family as dds
from fieldtest.middleware.fastdds import family as fastdds
from fieldtest.middleware.mqtt import family as mqtt
from fieldtest.middleware.rmw_zenoh import family as rmw_zenoh
from fieldtest.middleware.zenoh import family as zenoh
from fieldtest.record import TrialRequest

from .base import Middleware

if TYPE_CHECKING:
    from fieldtest.security.keystore import KeystoreMaterial

FAMILY_MODULES = (dds, zenoh, mqtt, rmw_zenoh, fastdds)
REGISTRY: dict[str, Middleware] = {
    name: entry for name, entry in sorted(
        ((m.name, m) for module in FAMILY_MODULES for m in module.MIDDLEWARES),
        key=lambda item: LAB_MIDDLEWARES.index(item[0]),
    )
}  # fmt: skip


class UnknownMiddlewareError(FieldtestError, ValueError):
    """A name no family module declares."""


def get(name: str) -> Middleware:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownMiddlewareError(
            f"unknown middleware {name!r} (choose from {', '.join(REGISTRY)})"
        ) from None


def names(*, lab: bool = False) -> tuple[str, ...]:
    """The twin's middlewares in report order; ``lab=True`` adds the lab-only ones."""
    return LAB_MIDDLEWARES if lab else TWIN_MIDDLEWARES


def families() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for name, entry in REGISTRY.items():
        out.setdefault(entry.family, []).append(name)
    return {family: tuple(members) for family, members in out.items()}


def open_transport(config: TransportConfig, role: Role):
    """Join the link as ``role`` with ``config.middleware``'s transport, secured as configured."""
    return get(config.middleware).open_transport(config, role)


def keystore_material() -> tuple[KeystoreMaterial, ...]:
    """What every middleware that has material of its own writes into a kit keystore
    (``Middleware.keystore_material``), for ``create_keystore(..., extra_material=)``: a keystore
    made by ``fieldtest keys`` or for a trial serves every middleware."""
    writers = {
        type(m).keystore_material: m.keystore_material
        for m in REGISTRY.values()
        if type(m).keystore_material is not Middleware.keystore_material
    }
    return tuple(writers.values())


def prepare_trial_security(request: TrialRequest, trial_dir: str | Path) -> TrialRequest:
    """``request`` with its keystore checked or made (``fieldtest.security.trial``), for the
    settings and listeners its middleware declares."""
    from fieldtest.security.trial import prepare_trial_security as prepare

    return prepare(request, Path(trial_dir), get(request.transport.middleware), keystore_material())


def infrastructure(
    config: TransportConfig, workdir: str | Path, *, prefix: list[str] | None = None, realtime: bool = False
):
    """The router or broker ``config.middleware`` needs (not started), or None."""
    return get(config.middleware).infrastructure(config, workdir, prefix=prefix, realtime=realtime)
