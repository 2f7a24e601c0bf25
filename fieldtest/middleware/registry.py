"""The middleware registry: one ``Middleware`` object per name, from the family packages.

    from fieldtest.middleware import registry
    registry.get("zenoh-peer").open_transport(config, "host")
    registry.names()            # what the twin runs, in report order
    registry.names(lab=True)    # plus the lab-only variants

A family is found by its name in the catalog (``fieldtest.catalog.CATALOG``), never listed here: family
``F`` lives in the package ``fieldtest.middleware.<F with "-" as "_">``, and that
package holds (``fieldtest.catalog.family_package``)

- ``family.py`` (required): one ``Middleware`` subclass per catalog name of the family
  (``fieldtest.middleware.declaration``) and ``MIDDLEWARES``, a tuple of one instance of each;
- ``settings.py`` (only if the family has link settings of its own): ``Settings``, a frozen pydantic
  model with a default for every field, plain data (it imports no middleware library: every layer
  reads it). ``fieldtest.linkconfig.TransportConfig`` holds it under the family's name (YAML
  ``<family>: {field: value}``; the flat ``<family>_<field>`` of older configs is read too), and
  callers read it as ``config.settings(Settings)``. A field named ``port`` is a port the family's
  processes listen on: trials beside each other get a free one each (``with_ports``). It may also
  name the fields a lab launch takes (``LAUNCH_FIELDS``: ``zenoh_port:=``) and their lab defaults
  (``lab_defaults``), and declare ``LabSettings``, what only its lab launch takes
  (``mqtt_inject_timestamp:=``, read as ``cfg.lab_settings(LabSettings)``: middleware.launch);
- ``wire.py`` (only if its processes talk over TCP or on UDP ports of their own): its kinds in a
  capture's accounting (fieldtest.netem.wire), plain data like its settings;
- whatever its hooks import when called (``transport.py``, ``infra.py``, ``security.py``, ``lab.py``,
  ...), named after what they hold.

A member of a family may have a package of its own, named after it, holding its ``family.py``
(``fastdds``: the dds family's settings and security, another DDS library). So adding a family is its
folder plus its lines in the catalog. No module outside a family (another family, or any other
part of the kit) imports its private (``_``) names; what two families share lives in
``fieldtest.middleware`` itself (docs/architecture.md, "How to add a middleware")."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from fieldtest.catalog import CATALOG, LAB_MIDDLEWARES, TWIN_MIDDLEWARES, family_package
from fieldtest.catalog import family as catalog_family
from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import Role, TransportConfig
from fieldtest.record import TrialRequest

from .declaration import Middleware

if TYPE_CHECKING:
    from fieldtest.middleware.launch import LabLaunch
    from fieldtest.procs import ManagedProcess
    from fieldtest.security.keystore import KeystoreMaterial
    from fieldtest.security.machineshare import ShareMaterial
    from fieldtest.transport.base import Transport


def _declaring_packages() -> dict[str, str]:
    """Package -> the family whose names it declares: each family's package, and the package of a
    family member that has one of its own (``fastdds``, of family ``dds``: another DDS library)."""
    packages = {family_package(entry.family): entry.family for entry in CATALOG}
    for entry in CATALOG:
        own = family_package(entry.name)
        if own not in packages and importlib.util.find_spec(own) is not None:
            packages[own] = entry.family
    return packages


def _declared() -> dict[str, Middleware]:
    """Every declaring package's ``MIDDLEWARES``, in the catalog's report order."""
    found: dict[str, Middleware] = {}
    for package, family in _declaring_packages().items():
        module = importlib.import_module(package + ".family")
        for m in module.MIDDLEWARES:
            if catalog_family(m.name) != family:  # one name, one home: the catalog's family
                raise FieldtestError(
                    f"{module.__name__} declares {m.name!r}, a name of family {catalog_family(m.name)!r}"
                )
            found[m.name] = m
    return {name: found[name] for name in sorted(found, key=_report_position)}


def _report_position(name: str) -> int:
    return LAB_MIDDLEWARES.index(name) if name in LAB_MIDDLEWARES else len(LAB_MIDDLEWARES)


REGISTRY: dict[str, Middleware] = _declared()


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


def open_transport(config: TransportConfig, role: Role) -> Transport:
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


def keystore_shares() -> tuple[ShareMaterial, ...]:
    """What every middleware with material of its own gives a machine's share of a keystore
    (``Middleware.keystore_share``), for ``export_machine(..., extra_shares=)``."""
    return tuple(
        m.keystore_share for m in REGISTRY.values() if type(m).keystore_share is not Middleware.keystore_share
    )


def prepare_trial_security(request: TrialRequest, trial_dir: str | Path) -> TrialRequest:
    """``request`` with its keystore checked or made (``fieldtest.security.trialsecurity``), for the
    settings and listeners its middleware declares."""
    from fieldtest.security.trialsecurity import prepare_trial_security as prepare

    return prepare(request, Path(trial_dir), get(request.transport.middleware), keystore_material())


def infrastructure(
    config: TransportConfig, workdir: str | Path, *, prefix: list[str] | None = None, realtime: bool = False
) -> ManagedProcess | None:
    """The router or broker ``config.middleware`` needs (not started), or None."""
    return get(config.middleware).infrastructure(config, workdir, prefix=prefix, realtime=realtime)


def lab_launch_problem(cfg: LabLaunch) -> str:
    """Why one lab side's checked launch settings would not work on their middleware (one line
    naming the argument and the fix), or "": the security setting it takes, a family's lab-only
    setting set on another family's middleware (``LabLaunch.foreign_lab_setting``: DDS's static
    peers), SROS2's relay, and the middleware's own ``lab_launch_problem``."""
    entry = get(cfg.middleware)
    if cfg.security != "none" and not entry.own_security:
        from fieldtest.security.securitysettings import SecuritySettingError

        try:
            entry.security_setting(cfg.security)
        except SecuritySettingError as exc:
            return f"security: {exc}"
    foreign = cfg.foreign_lab_setting()
    if foreign:
        return foreign
    if cfg.security != "none" and entry.lab_dds_crosses() and not cfg.relay:
        # SROS2 on plain DDS: the Create 3 (on Jazzy its republisher too) is outside the secure
        # domain, so only the link monitor's relay (publishing from a plain context) reaches it.
        return (
            f"relay: security {cfg.security} on middleware {cfg.middleware} needs relay:=true on both "
            "sides (--host-arg relay=true --robot-arg relay=true): the Create 3 cannot join the SROS2 "
            "domain, so without the relay it never hears the host"
        )
    return entry.lab_launch_problem(cfg)
