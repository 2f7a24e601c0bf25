"""Security as part of a trial: the keystore a trial's processes use, checked before any of them starts.

``prepare_trial_security(request, trial_dir, middleware)`` is called by the trial runner right
before it writes trial.yaml (through ``fieldtest.middleware.registry.prepare_trial_security``, which
hands in the request's ``Middleware``: the settings it takes and the TLS listeners it has, and what
the middleware families add to a keystore). For a secured trial it either checks the keystore the
request names or creates a fresh one in ``<trial>/keystore`` (for the trial's domain id, namespace
and addresses, with the families' material), makes the setting's governance the active one, and
returns the request with ``transport.keystore`` set; the host, robot, router and broker processes
then apply the setting by themselves (the transports read ``security`` and ``keystore`` from the
request).

Runs of several trials in one process (threads) are safe: nothing here touches process state
(environment, working directory), a fresh keystore belongs to one trial, and activating a governance
replaces the file atomically, so a trial reading a shared keystore never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from fieldtest.errors import FieldtestError
from fieldtest.linkconfig import TransportConfig
from fieldtest.record import TrialRequest

from . import enforce, glue
from .governance import DEFAULT_GOVERNANCE
from .keystore import (
    DEFAULT_TLS_NAMES,
    ENCLAVES,
    KeystoreError,
    KeystoreMaterial,
    KeystoreOptions,
    check_keystore,
    create_keystore,
    governance_variant_path,
)
from .securitysettings import SecuritySetting, SecuritySettingError, get_setting, governance_path

TRIAL_KEYSTORE_DIR = "keystore"


class TrialSecurityError(FieldtestError, ValueError):
    """A trial's security cannot be set up; one line naming the setting or file at fault."""


def trial_addresses(config: TransportConfig) -> tuple[str, ...]:
    """The addresses the trial's TLS certificates must name (besides localhost and 127.0.0.1)."""
    addresses = (config.host_address, config.robot_address, config.router_address, config.broker_address)
    return tuple(a for a in dict.fromkeys(addresses) if a not in DEFAULT_TLS_NAMES)


class TrialMiddleware(Protocol):
    """What a trial's security asks of its middleware (``fieldtest.middleware.declaration.Middleware``)."""

    def security_setting(self, name: str) -> SecuritySetting:
        """The setting ``name``; SecuritySettingError unless the middleware takes it."""
        ...

    def tls_listeners(self, config: TransportConfig) -> list[tuple[str, str]]:
        """(TLS identity, address) of every process that accepts TLS connections in the trial."""
        ...


def _roles(config: TransportConfig, middleware: TrialMiddleware) -> list[str]:
    listeners = middleware.tls_listeners(config)
    return ["host", "robot", *(name for name, _ in listeners if name not in ("host", "robot"))]


def check_trial_keystore(config: TransportConfig, middleware: TrialMiddleware) -> None:
    """Raise TrialSecurityError unless ``config.keystore`` serves this trial's processes.

    The whole keystore must pass ``check_keystore``; then every process of the trial is checked as
    it will be when it starts (its own credentials, the domain id, the TLS names of the listeners).
    """
    problems = check_keystore(config.keystore)
    if problems:
        more = f" (and {len(problems) - 1} more; run `fieldtest keys check`)" if len(problems) > 1 else ""
        raise TrialSecurityError(f"keystore for security {config.security!r}: {problems[0]}{more}")
    try:
        middleware.security_setting(config.security)
        for role in _roles(config, middleware):
            enforce.require_credentials(config, role)
        if get_setting(config.security).governance is not None:
            glue.check_governance_domain(Path(config.keystore), config.security, config.domain_id)
            governance_path(config.keystore, "host", config.security)
        for identity, address in middleware.tls_listeners(config):
            glue.require_tls_name(Path(config.keystore), identity, address)
    except (KeystoreError, SecuritySettingError) as exc:
        raise TrialSecurityError(str(exc)) from None


def create_trial_keystore(
    config: TransportConfig, folder: Path, extra_material: Iterable[KeystoreMaterial] = ()
) -> Path:
    """A fresh keystore for this trial: its domain id, namespace and addresses, with
    ``extra_material`` (``create_keystore``'s: what the middleware families add)."""
    options = KeystoreOptions(
        domain_id=config.domain_id, namespace=config.namespace, tls_names=trial_addresses(config)
    )
    try:
        return create_keystore(folder, options, extra_material).absolute()
    except KeystoreError as exc:
        raise TrialSecurityError(str(exc)) from None


def _replace_atomically(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` so that a concurrent reader sees the old or the new file."""
    data = source.read_bytes()
    if target.is_file() and target.read_bytes() == data:
        return
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def activate_setting_governance(keystore: Path | str, setting: str) -> None:
    """Make the DDS setting's governance the keystore's active one (what ROS 2 nodes in the lab read).

    The twin's DDS processes read the setting's own governance file, so trials with different
    settings can share a keystore; the active copy is for ``ros2`` nodes using the same keystore.
    Settings without a governance (mtls-acl) keep SROS2's default.
    """
    governance = get_setting(setting).governance or DEFAULT_GOVERNANCE
    variant = governance_variant_path(keystore, governance)
    if not variant.is_file():
        raise TrialSecurityError(
            f"{variant}: no governance for setting {setting!r} (run `fieldtest keys create`)"
        )
    for suffix in (".xml", ".p7s"):
        _replace_atomically(variant.with_suffix(suffix), Path(keystore) / ENCLAVES / f"governance{suffix}")


def prepare_trial_security(
    request: TrialRequest,
    trial_dir: Path,
    middleware: TrialMiddleware,
    extra_material: Iterable[KeystoreMaterial] = (),
) -> TrialRequest:
    """The request with ``transport.keystore`` set and checked, for ``request.transport.security``.

    "none": the request unchanged. Otherwise ``middleware`` must take the setting; the keystore
    named by the request is checked (any problem: TrialSecurityError, one line), or without one a
    fresh keystore is made in ``trial_dir/keystore``, with ``extra_material`` (what the middleware
    families add to a keystore). The setting's governance is activated.
    """
    config = request.transport
    try:
        setting = middleware.security_setting(config.security)
    except SecuritySettingError as exc:
        raise TrialSecurityError(str(exc)) from None
    if setting.kind == "none":
        return request
    if config.keystore:
        keystore = Path(config.keystore).absolute()
        if not keystore.is_dir():
            raise TrialSecurityError(
                f"{keystore}: keystore directory not found (create it with `fieldtest keys create`)"
            )
    else:
        keystore = create_trial_keystore(config, Path(trial_dir) / TRIAL_KEYSTORE_DIR, extra_material)
    config = config.model_copy(update={"keystore": str(keystore)})
    check_trial_keystore(config, middleware)
    if setting.governance is not None:
        activate_setting_governance(keystore, setting.name)
    return request.model_copy(update={"transport": config})
