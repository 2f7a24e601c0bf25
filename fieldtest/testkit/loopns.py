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
