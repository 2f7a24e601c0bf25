"""Enforce: a process whose own credentials are missing, expired or not from the keystore CA refuses to start.

This is ROS 2's ``ROS_SECURITY_STRATEGY=Enforce`` for the kit's twin processes: the transports call
these functions (``fieldtest.middleware.<family>.security``, after checking that the middleware takes
the setting) whenever ``config.security`` is not
"none", so a host, robot, router or broker with broken keys stops at once with one line naming the
file, instead of starting and silently never matching its peers.

What is checked for the process' own identity (not the whole keystore, which ``check_keystore``
does once per trial in ``fieldtest.security.trialsecurity``):

- DDS enclave: the six files, certificate dates, certificate signed by the identity CA, key
  matching the certificate, permissions signed by the permissions CA and within their dates.
- TLS identity (Zenoh, Mosquitto): ``ca.pem``, certificate and key present, certificate dates,
  certificate signed by ``ca.pem``, key matching the certificate.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from . import glue
from .keystore import (
    KeystoreError,
    _check_enclave,
    _check_governance,
    cert_date_problems,
    load_cert,
    load_key,
    tls_files,
)
from .policy import kit_enclave
from .securitysettings import get_setting


def _first_problem(problems: list[str], what: str) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise KeystoreError(f"{what}: {problems[0]}{more}")


def _dates(path: Path, now: dt.datetime) -> list[str]:
    return cert_date_problems(load_cert(path), path, now)


def tls_identity_problems(keystore: Path | str, name: str, now: dt.datetime | None = None) -> list[str]:
    """Problems of TLS identity ``name`` (host, robot, router, broker) in ``keystore/tls``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    files = tls_files(keystore, name)
    missing = [
        f"{p}: missing (run `fieldtest keys tls`)"
        for p in (files.ca, files.cert, files.key)
        if not p.is_file()
    ]
    if missing:
        return missing
    try:
        problems = _dates(files.cert, now)
        cert, ca = load_cert(files.cert), load_cert(files.ca)
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):
            problems.append(f"{files.cert}: not signed by {files.ca}")
        if load_key(files.key).public_key() != cert.public_key():
            problems.append(f"{files.key}: does not match {files.cert.name}")
    except KeystoreError as exc:  # unreadable certificate or key
        return [str(exc)]
    return problems


def enclave_problems(keystore: Path | str, role: str, now: dt.datetime | None = None) -> list[str]:
    """Problems of the DDS enclave of ``role`` (host, robot, ... or an enclave path)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    root = Path(keystore)
    enclave = role if role.startswith("/") else kit_enclave(role).path
    _, domains = _check_governance(root)
    try:
        return _check_enclave(root, enclave, domains, now)
    except KeystoreError as exc:
        return [str(exc)]


def require_credentials(config: Any, role: str) -> None:
    """Refuse (KeystoreError / SecuritySettingError, one line) unless ``role`` can join securely."""
    setting = get_setting(config.security)
    if setting.kind == "none":
        return
    keystore = glue.keystore_of(config)
    if setting.governance is not None:  # DDS Security: the enclave
        problems = enclave_problems(keystore, role)
    else:
        problems = tls_identity_problems(keystore, role)
    _first_problem(problems, f"{role} cannot start with security {config.security!r}")
