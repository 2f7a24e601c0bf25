"""Which of a trial's machines sit on the emulated link: the trial's ``topology`` resolved.

Named placements (docs/networks.md, "Topology"):

- ``seed``: as the seed study (Zhang et al., section 3.1): host and robot on
  the link, like two stations of one Wi-Fi access point; on a cellular profile (``cellular: true``,
  e.g. ``4g``) every machine has a modem of its own, so the router or broker gets its own leg too.
- ``robot-only``: the robot alone; the profile is then the whole path between it and the rest.
- ``all``: host, robot and the router/broker machine.

A list names the nodes; ``broker`` and ``router`` both mean the middleware's own router/broker
machine and are left out where the middleware has none (it then runs beside the host).
"""

from __future__ import annotations

from collections.abc import Sequence

from fieldtest.netem.profiles import LinkProfile

INFRA_ALIASES = ("broker", "router")


def wireless_nodes(topology: str | Sequence[str], profile: LinkProfile, infra_node: str | None) -> list[str]:
    """The nodes on the emulated link, in host, robot, infrastructure order.

    ``infra_node``: the node the middleware's router/broker runs on when it has one of its own
    (``broker``, ``router``), else None."""
    if topology == "seed":
        wanted = ["host", "robot", *(INFRA_ALIASES if profile.cellular else ())]
    elif topology == "robot-only":
        wanted = ["robot"]
    elif topology == "all":
        wanted = ["host", "robot", *INFRA_ALIASES]
    elif isinstance(topology, str):
        raise ValueError(
            f"topology {topology!r}: seed, robot-only, all, or a list of host, robot, broker, router"
        )
    else:
        wanted = list(topology)
    nodes = [n for n in ("host", "robot") if n in wanted]
    if infra_node is not None and any(n in wanted for n in INFRA_ALIASES):
        nodes.append(infra_node)
    return nodes
