"""``fieldtest keys``: create, check and extend the kit's SROS2-layout keystore.

``fieldtest.cli.keys_main`` runs it with what the middleware families add to a keystore and to a
machine's share of it (the registry's ``keystore_material()``, ``keystore_shares()``), which this
layer does not reach."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable

from .governance import GOVERNANCE_PROFILES
from .keystore import (
    KeystoreMaterial,
    KeystoreOptions,
    Validity,
    activate_governance,
    create_keystore,
    create_tls_material,
    list_enclaves,
)
from .machineshare import MACHINES, ShareMaterial, check_keystore, export_machine, keystore_machine


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fieldtest keys",
        description="SROS2-layout keystore for DDS Security, Zenoh mTLS and Mosquitto TLS (one CA).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def keystore_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--keystore",
            default=os.environ.get("ROS_SECURITY_KEYSTORE"),
            required="ROS_SECURITY_KEYSTORE" not in os.environ,
            help="keystore directory (default: $ROS_SECURITY_KEYSTORE)",
        )

    def validity_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--valid-days", type=float, default=3650, help="certificate lifetime (default 3650)")
        p.add_argument(
            "--start-days",
            type=float,
            default=-1.0,
            help="validity start relative to now, in days (default -1: tolerates clock skew)",
        )

    def tls_names_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--tls-name",
            action="append",
            default=[],
            metavar="ADDR",
            help="extra IP address or host name for the TLS certificates (repeatable; "
            "localhost and 127.0.0.1 are always included)",
        )

    create = sub.add_parser("create", help="create or complete a keystore with the kit's enclaves")
    keystore_arg(create)
    create.add_argument("--domain-id", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "0")))
    create.add_argument("--namespace", default="", help="robot namespace prepended to the trial topics")
    validity_args(create)
    tls_names_arg(create)

    check = sub.add_parser("check", help="verify files, signatures, chains and validity dates")
    keystore_arg(check)

    export = sub.add_parser(
        "export",
        help="copy one machine's share (CA certificate, governance, its own keys) for that machine",
    )
    keystore_arg(export)
    export.add_argument("--for", dest="machine", required=True, choices=sorted(MACHINES))
    export.add_argument("out", help="folder to write (an earlier share there is replaced)")

    tls = sub.add_parser("tls", help="(re)issue Zenoh/Mosquitto TLS certificates from the keystore CA")
    keystore_arg(tls)
    validity_args(tls)
    tls_names_arg(tls)

    gov = sub.add_parser("governance", help="make a DDS setting's governance the one all enclaves use")
    keystore_arg(gov)
    gov.add_argument("--setting", required=True, choices=sorted(GOVERNANCE_PROFILES))
    return parser


def _report(keystore: str) -> int:
    problems = check_keystore(keystore)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if problems:
        print(f"{keystore}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    machine = keystore_machine(keystore)
    share = f" ({machine}'s share: TLS {', '.join(MACHINES[machine].tls)})" if machine else ""
    print(f"{keystore}: ok{share}, enclaves {', '.join(list_enclaves(keystore)) or 'none'}")
    return 0


def keys_command(
    argv: list[str], *, extra_material: Iterable[KeystoreMaterial], extra_shares: Iterable[ShareMaterial] = ()
) -> int:
    """``fieldtest keys`` with ``argv``; ``create`` adds ``extra_material`` (``create_keystore``'s),
    ``export`` ``extra_shares`` (``export_machine``'s)."""
    args = _parser().parse_args(argv)
    if args.command == "create":
        validity = Validity.from_days(args.valid_days, args.start_days)
        options = KeystoreOptions(
            domain_id=args.domain_id,
            namespace=args.namespace,
            validity=validity,
            tls_names=tuple(args.tls_name),
        )
        create_keystore(args.keystore, options, extra_material)
        print(
            f"{args.keystore}: created (domain {args.domain_id}, valid "
            f"{validity.not_before:%Y-%m-%d} .. {validity.not_after:%Y-%m-%d} UTC)"
        )
        return _report(args.keystore)
    if args.command == "check":
        return _report(args.keystore)
    if args.command == "export":
        export_machine(args.keystore, args.machine, args.out, extra_shares)
        print(f"{args.out}: {args.machine}'s share of {args.keystore}")
        return _report(args.out)
    if args.command == "tls":
        files = create_tls_material(
            args.keystore,
            names=args.tls_name,
            validity=Validity.from_days(args.valid_days, args.start_days),
        )
        print(f"{args.keystore}/tls: {', '.join(sorted(files))}")
        return 0
    activate_governance(args.keystore, args.setting)
    print(f"{args.keystore}: enclaves now use governance {args.setting!r}")
    return 0
