"""One machine's share of a keystore: what ``fieldtest keys export --for <machine>`` copies out of
the laptop's keystore, and ``check_keystore``, which checks a whole keystore or such a copy.

A lab keystore holds the CA's private key and every identity's key. Each machine needs only the
CA certificate (to verify its peers), the signed governance and permissions, and its own
identities' keys and certificates; with its copy alone a stolen Pi cannot sign new identities nor
pose as the host, the router or the broker. A machine's copy keeps the keystore layout (the
middleware reads the same paths) and names its machine in ``fieldtest/machine``.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from fieldtest.names import (
    BRIDGE_HOST_ENCLAVE,
    BRIDGE_ROBOT_ENCLAVE,
    HOST_ENCLAVE,
    MOCAP_DRIVER_ENCLAVE,
    MOCAP_ENCLAVE,
    RECORDER_ENCLAVE,
    ROBOT_ENCLAVE,
    ROLE_ENCLAVES,
)

from .enforce import tls_identity_problems
from .keystore import (
    CA_FILES,
    ENCLAVES,
    KIT_DIR,
    PRIVATE,
    PUBLIC,
    TLS_DIR,
    KeystoreError,
    _check_enclave,
    _check_governance,
    _symlink,
    cert_date_problems,
    enclave_dir,
    list_enclaves,
    load_cert,
    tls_files,
)
from .keystore import check_keystore as check_whole_keystore

MACHINE_FILE = f"{KIT_DIR}/machine"  # in a machine's copy: the machine, then its own private key files


@dataclass(frozen=True)
class MachineShare:
    """The identities a machine's processes run as: kit DDS enclaves and TLS identities."""

    enclaves: tuple[str, ...]
    tls: tuple[str, ...]


# ros2 bag record runs on both machines under one enclave (fieldtest.security.policy), so both
# hold the recorder's key; the host runs the Zenoh router and the local broker of the lab cases.
MACHINES: dict[str, MachineShare] = {
    "host": MachineShare(
        (HOST_ENCLAVE, BRIDGE_HOST_ENCLAVE, RECORDER_ENCLAVE, MOCAP_ENCLAVE, MOCAP_DRIVER_ENCLAVE),
        ("host", "router", "broker"),
    ),
    "robot": MachineShare((ROBOT_ENCLAVE, BRIDGE_ROBOT_ENCLAVE, RECORDER_ENCLAVE), ("robot",)),
    "broker": MachineShare((), ("broker",)),  # mqtt-broker's separate machine
    "router": MachineShare((), ("router",)),  # a Zenoh router on a machine of its own
}
# Files of tls/ besides the identities' that a machine keeps: the broker's ACL (fieldtest.middleware.mqtt.security)
TLS_SHARED_FILES = ("ca.pem", "mosquitto.acl")
# What a middleware family's own keystore material gives a machine whose processes run as the given
# kit enclaves (``Middleware.keystore_share``): paths relative to the whole keystore, files or folders.
ShareMaterial = Callable[[Path, tuple[str, ...]], Iterable[str]]


def _marker(keystore: Path | str) -> list[str]:
    marker = Path(keystore) / MACHINE_FILE
    return marker.read_text().split() if marker.is_file() else []


def keystore_machine(keystore: Path | str) -> str | None:
    """The machine a keystore is the share of, None for a whole keystore (or none at all)."""
    return next(iter(_marker(keystore)), None)


def machine_share(machine: str) -> MachineShare:
    try:
        return MACHINES[machine]
    except KeyError:
        raise KeystoreError(f"no machine {machine!r} (known: {', '.join(MACHINES)})") from None


def export_machine(
    keystore: Path | str, machine: str, out: Path | str, extra_shares: Iterable[ShareMaterial] = ()
) -> Path:
    """Write ``machine``'s share of the whole ``keystore`` to ``out`` (replacing an earlier share
    there; any other existing folder is refused, so nothing the user keeps is deleted), with what
    each of ``extra_shares`` (the families', ``fieldtest.middleware.registry.keystore_shares``) adds."""
    share = machine_share(machine)
    source, target = Path(keystore), Path(out)
    if keystore_machine(source) is not None:
        raise KeystoreError(
            f"{source}: is {keystore_machine(source)}'s share already: export from the whole keystore"
        )
    if not (source / PRIVATE).is_dir():
        raise KeystoreError(
            f"{source}: not a whole keystore (no {PRIVATE}/): export from the one `fieldtest keys create` made"
        )
    if target.exists():
        if keystore_machine(target) is None:
            raise KeystoreError(f"{target}: exists and is no machine's share: choose another folder")
        shutil.rmtree(target)
    (target / PUBLIC).mkdir(parents=True)
    shutil.copyfile(source / PUBLIC / CA_FILES[0], target / PUBLIC / CA_FILES[0])
    for name in CA_FILES[1:]:
        _symlink(target / PUBLIC / name, CA_FILES[0])
    enclaves = [e for e in share.enclaves if (enclave_dir(source, e) / "key.pem").is_file()]
    extra = [relative for material in extra_shares for relative in material(source, share.enclaves)]
    if enclaves or extra:  # DDS Security: the active governance and its variants
        (target / ENCLAVES).mkdir()
        for suffix in (".xml", ".p7s"):
            shutil.copyfile(
                source / ENCLAVES / f"governance{suffix}", target / ENCLAVES / f"governance{suffix}"
            )
        shutil.copytree(source / KIT_DIR / "governance", target / KIT_DIR / "governance")
    # relative links (CA, governance) resolve in the same layout
    for relative in [enclave_dir("", e).as_posix() for e in enclaves] + extra:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        if (source / relative).is_dir():
            shutil.copytree(source / relative, target / relative, symlinks=True)
        else:
            shutil.copyfile(source / relative, target / relative)
    tls_source = source / TLS_DIR
    (target / TLS_DIR).mkdir()
    for name in (*TLS_SHARED_FILES, *(f"{i}.{kind}" for i in share.tls for kind in ("crt", "key"))):
        if (tls_source / name).is_file():
            shutil.copy2(tls_source / name, target / TLS_DIR / name)
    (target / KIT_DIR).mkdir(exist_ok=True)
    own = [key.relative_to(target).as_posix() for key in _private_keys(target)]
    (target / MACHINE_FILE).write_text("\n".join([machine, *own]) + "\n")
    return target


def _private_keys(root: Path) -> list[Path]:
    """Every private key file under ``root`` (links not followed: a link to a key is the key's)."""
    return sorted(
        p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and b"PRIVATE KEY" in p.read_bytes()
    )


def check_machine_keystore(root: Path, machine: str, now: dt.datetime) -> list[str]:
    """Every problem of ``machine``'s share: its own identities present, valid and signed by the
    CA; no CA key and no other identity's key in it (the share would defeat its purpose)."""
    if machine not in MACHINES:
        return [
            f"{root / MACHINE_FILE}: names no machine of the kit ({machine!r}; known: {', '.join(MACHINES)})"
        ]
    share = MACHINES[machine]
    problems = [f"{root / PUBLIC / n}: missing" for n in CA_FILES if not (root / PUBLIC / n).is_file()]
    if problems:
        return problems
    ca = root / PUBLIC / CA_FILES[0]
    problems += cert_date_problems(load_cert(ca), ca, now)
    own = {root / relative for relative in _marker(root)[1:]}  # as the export listed them
    tls_keys = {tls_files(root, identity).key for identity in share.tls}  # reported with their identity
    problems += [f"{key}: missing" for key in sorted(own - tls_keys) if not key.is_file()]
    for key in _private_keys(root):
        if key not in own:
            problems.append(
                f"{key}: a private key {machine} does not use (the CA's or another machine's): "
                f"replace this folder with `fieldtest keys export --for {machine}`"
            )
    if share.enclaves:
        governance_problems, domains = _check_governance(root)
        problems += governance_problems
        present = set(list_enclaves(root))
        own_role = [e for e in share.enclaves if e in ROLE_ENCLAVES.values()]  # the others are optional
        problems += [f"{enclave_dir(root, e)}: missing" for e in own_role if e not in present]
        for enclave in sorted(present):
            try:
                problems += _check_enclave(root, enclave, domains, now)
            except KeystoreError as exc:
                problems.append(str(exc))
    for identity in share.tls:
        problems += tls_identity_problems(root, identity, now)
    return list(dict.fromkeys(problems))


def check_keystore(path: Path | str, now: dt.datetime | None = None) -> list[str]:
    """Every problem of a keystore, whole or one machine's share (empty list = usable), each naming
    the file at fault."""
    root = Path(path)
    machine = keystore_machine(root) if root.is_dir() else None
    if machine is None:
        return check_whole_keystore(root, now)
    return check_machine_keystore(root, machine, now or dt.datetime.now(dt.timezone.utc))
