"""A network namespace of a test's own with only its loopback up: traffic on ``lo`` there is the
test's and nothing else's."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def loopback_namespace(name: str) -> Iterator[list[str]]:
    """Create namespace ``name``, bring its ``lo`` up and yield the command prefix that runs a
    program inside it; the namespace is deleted on the way out."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)


@contextlib.contextmanager
def namespace_with_an_interface(name: str, address: str) -> Iterator[list[str]]:
    """A namespace of its own with a veth pair (up, one end addressed ``address``/24): an interface
    with multicast, as a robot's, on which nothing leaves the namespace. Fast DDS 2.14 (the ROS 2
    wheels) never answers the unicast announcements of a participant over loopback."""
    with loopback_namespace(name) as prefix:
        for argv in (
            ["link", "add", "ftv0", "type", "veth", "peer", "name", "ftv1"],
            ["addr", "add", f"{address}/24", "dev", "ftv0"],
            ["link", "set", "ftv0", "up"],
            ["link", "set", "ftv1", "up"],
        ):
            subprocess.run(["ip", "-n", prefix[-1], *argv], check=True)
        yield prefix
