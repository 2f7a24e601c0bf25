"""A cluster worker's side: what this machine can run, and ``fieldtest cluster worker``, which
starts a Dask worker (``dask worker``) declaring it.

A worker declares Dask resources: ``trial`` (the trials it runs at once: the cores left free after
its measured headroom, as ``fieldtest campaign --parallel auto`` decides), one resource per
capability it has (``root``, ``netns``, ``ns3``, ``zenoh-bridge``) and its kit version
(``kit-<digest>``), each as many as ``trial``. A trial asks for one ``trial``, its kit version and
each capability it needs (``trial_needs``), so Dask's own placement sends it only to a worker that
can run it, and never more at once than that worker's headroom allows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import socket
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from fieldtest.machine import MachineMonitor, MachineReport
from fieldtest.middleware import registry
from fieldtest.record import TrialRequest
from fieldtest.runner.batches import HEADROOM_SAMPLE_S, TRIAL_CORES, parallel_from_headroom

TRIAL_SLOT = "trial"
CAPABILITIES = ("root", "netns", "ns3", "zenoh-bridge")
FACTS_ENV = "FIELDTEST_WORKER_FACTS"  # what `fieldtest cluster worker` measured, for each trial's record
KIT_DIR = Path(__file__).resolve().parents[1]
_KIT_SUFFIXES = (".py", ".c", ".cc", ".msg")


@lru_cache(maxsize=1)
def kit_version() -> str:
    """The kit's release and a digest of its own files: two machines with the same string run the
    same kit, an edited file included."""
    from importlib import metadata

    return f"{metadata.version('fieldtest')}+{kit_digest(KIT_DIR)}"


def kit_digest(package: Path) -> str:
    """A digest of the package's code, C sources, messages and data (not its byte-code caches)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        if path.suffix in _KIT_SUFFIXES or path.parent.name == "data":
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def kit_resource(version: str) -> str:
    """The Dask resource naming a kit version (a resource name is a plain word)."""
    return "kit-" + version.split("+")[-1]


def trial_needs(request: TrialRequest) -> list[str]:
    """The capabilities a worker must have to run ``request`` as this machine would."""
    from fieldtest.runner.twintrial import _with_twin_defaults

    request = _with_twin_defaults(request)  # Zenoh: the bridged path unless the request names one
    needs = []
    if request.network != "loopback":  # each machine of the trial in its own namespace
        from fieldtest.netem import get_profile

        needs += ["root", "netns"]
        if get_profile(request.network).wifi80211 is not None:
            needs.append("ns3")
    if registry.get(request.transport.middleware).bridged(request.transport):
        needs.append("zenoh-bridge")
    return needs


def detect_capabilities() -> dict[str, str]:
    """Each capability: "" if this machine has it, else why not (one line)."""
    from fieldtest.middleware.zenoh.bridge import BridgeMissingError, find_bridge
    from fieldtest.netem.topology import netns_available
    from fieldtest.netem.wifi80211 import Wifi80211Error, build_wifi_link

    found = {"root": "" if os.geteuid() == 0 else "not running as root"}
    ok, reason = netns_available()
    found["netns"] = "" if ok else reason
    try:
        build_wifi_link()  # quick when built (the install builds it)
        found["ns3"] = ""
    except Wifi80211Error as exc:
        found["ns3"] = str(exc)
    try:
        find_bridge()
        found["zenoh-bridge"] = ""
    except BridgeMissingError as exc:
        found["zenoh-bridge"] = str(exc)
    return found


def measure_slots() -> tuple[int, MachineReport]:
    """Trials this machine runs at once from its measured headroom, and the measurement."""
    cores = os.cpu_count() or 1
    with MachineMonitor() as monitor:
        time.sleep(HEADROOM_SAMPLE_S)
    machine = monitor.report()
    return parallel_from_headroom(int(cores / TRIAL_CORES), machine, cores), machine


def worker_resources(slots: int, capabilities: list[str], version: str) -> dict[str, int]:
    return {TRIAL_SLOT: slots, kit_resource(version): slots, **{c: slots for c in capabilities}}


def resources_arg(resources: dict[str, int]) -> str:
    return ",".join(f"{name}={count}" for name, count in resources.items())


def machine_facts() -> dict[str, Any]:
    """This machine as a trial's record names it."""
    return {
        "hostname": socket.gethostname(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _slots_arg(value: str) -> str:
    if value != "auto" and not (value.isdigit() and int(value) >= 1):
        raise argparse.ArgumentTypeError(f"{value!r}: a number of trials (1 or more) or auto")
    return value


def worker_command(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The ``dask worker`` command line and environment for ``fieldtest cluster worker argv``."""
    parser = argparse.ArgumentParser(
        prog="fieldtest cluster worker",
        description="Start a Dask worker that runs campaign trials, declaring what this machine can run.",
    )
    parser.add_argument("scheduler", help="the scheduler's address, e.g. tcp://10.0.0.5:8786")
    parser.add_argument("--name", default=socket.gethostname(), help="how trials name this worker")
    parser.add_argument(
        "--trials",
        type=_slots_arg,
        default="auto",
        help="trials run at once: a number, or auto (from the cores left free; default auto)",
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=CAPABILITIES,
        help="do not offer this capability although the machine has it (repeatable)",
    )
    parser.add_argument("--port", type=int, default=0, help="the worker's port (firewalls; default: any)")
    parser.add_argument("--listen-address", help="e.g. tcp://0.0.0.0:8788 (dask worker's own option)")
    parser.add_argument("--contact-address", help="the address others reach it by, behind NAT")
    parser.add_argument("--local-directory", type=Path, help="where trials are written before they ship")
    parser.add_argument("--dry-run", action="store_true", help="print the dask worker command and stop")
    args = parser.parse_args(argv)
    found = detect_capabilities()
    capabilities = [c for c in CAPABILITIES if not found[c] and c not in args.without]
    machine: MachineReport | None = None  # measured only for --trials auto
    if args.trials == "auto":
        slots, machine = measure_slots()
    else:
        slots = int(args.trials)
    version = kit_version()
    resources = worker_resources(slots, capabilities, version)
    command = [sys.executable, "-m", "distributed.cli.dask_worker", args.scheduler]
    command += ["--name", args.name, "--nthreads", str(slots), "--nworkers", "1", "--no-nanny"]
    command += ["--resources", resources_arg(resources), "--no-dashboard"]
    command += ["--preload", "fieldtest.runner.cluster"]  # imported once, not by the first trial
    if args.listen_address:
        command += ["--listen-address", args.listen_address]
    elif args.port:
        command += ["--worker-port", str(args.port)]
    if args.contact_address:
        command += ["--contact-address", args.contact_address]
    if args.local_directory:
        command += ["--local-directory", str(args.local_directory)]
    facts = {
        **machine_facts(),
        "capabilities": capabilities,
        "missing": {c: why for c, why in found.items() if why},
        "withheld": args.without,
        "trials_at_once": slots,
        "headroom": {"busy_pct": machine["busy_pct"], "steal_pct": machine["steal_pct"]} if machine else {},
    }
    print(
        f"worker {args.name}: kit {version}; capabilities {', '.join(capabilities) or 'none'}; "
        f"{slots} trial(s) at once"
        + (
            f" (cores {machine['busy_pct']:.0f} % busy, steal {machine['steal_pct']:.1f} %)"
            if machine
            else " (--trials)"
        ),
        flush=True,
    )
    for capability, why in facts["missing"].items():
        print(f"  no {capability}: {why.splitlines()[0]}", flush=True)
    return command, {**os.environ, FACTS_ENV: json.dumps(facts), "PYTHONUNBUFFERED": "1"}


def worker_main(argv: list[str]) -> int:
    command, env = worker_command(argv)
    if "--dry-run" in argv:
        print(" ".join(command))
        return 0
    os.execve(command[0], command, env)  # the Dask worker becomes this process (its pid, its signals)


def cluster_main(argv: list[str]) -> int:
    if not argv or argv[0] != "worker":
        print(
            "usage: fieldtest cluster worker SCHEDULER [options]  (fieldtest cluster worker --help)",
            file=sys.stderr,
        )
        return 2
    return worker_main(argv[1:])
