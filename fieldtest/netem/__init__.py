"""Emulated networks for the twin: namespaces, link profiles, the userspace link emulator, probes."""

from fieldtest.netem.probe import ProbeError, measure_link
from fieldtest.netem.profiles import (
    Direction,
    GilbertElliott,
    LinkProfile,
    ProfileError,
    builtin_profiles,
    get_profile,
    load_profiles,
    load_profiles_file,
)
from fieldtest.netem.topology import (
    LoopbackTopology,
    Topology,
    TopologyError,
    choose_backend,
    cleanup_stale,
    netem_available,
    netns_available,
    open_topology,
)

__all__ = [
    "Direction",
    "GilbertElliott",
    "LinkProfile",
    "LoopbackTopology",
    "ProbeError",
    "ProfileError",
    "Topology",
    "TopologyError",
    "builtin_profiles",
    "choose_backend",
    "cleanup_stale",
    "get_profile",
    "load_profiles",
    "load_profiles_file",
    "measure_link",
    "netem_available",
    "netns_available",
    "open_topology",
]
