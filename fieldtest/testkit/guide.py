"""The lab guide's copy-paste commands, as the test suite runs them against two emulated machines.

A fenced ``bash`` block in docs/lab-guide.md preceded by ``<!-- lab-step: NAME -->`` is a step a
lab user types as it stands, apart from the guide's example addresses and login, which
``for_machines`` replaces with the rehearsal's. The guide and the kit therefore cannot drift apart
unnoticed: a renamed option or a wrong path fails the step's test.
"""

from __future__ import annotations

import re
from pathlib import Path

from fieldtest.errors import FieldtestError

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "lab-guide.md"
STEP = re.compile(r"^<!-- lab-step: ([a-z0-9-]+) -->\n```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
# The guide's example values (section 2's fixed addresses, section 7's run command), longest first
# so that a login is replaced before the address inside it.
EXAMPLE_LOGIN = "ubuntu@192.168.1.20"
EXAMPLE_ADDRESSES = {
    "robot": "192.168.1.20",
    "host": "192.168.1.10",
    "broker": "192.168.1.30",
    "mocap": "192.168.10.5",
    "host_mocap": "192.168.10.10",
}


class GuideError(FieldtestError, ValueError):
    """A step the guide does not have, or one the replacement cannot place (one line)."""


def guide_steps(path: Path = GUIDE) -> dict[str, str]:
    """Every marked step of the guide: name -> the bash block's text."""
    steps: dict[str, str] = {}
    for match in STEP.finditer(path.read_text()):
        name, script = match.group(1), match.group(2)
        if name in steps:
            raise GuideError(f"{path}: lab-step {name!r} is marked twice")
        steps[name] = script
    return steps


def for_machines(script: str, login: str, addresses: dict[str, str]) -> str:
    """``script`` with the guide's example login and addresses replaced (``addresses`` by the
    names of EXAMPLE_ADDRESSES; a name left out keeps the guide's value)."""
    out = script.replace(EXAMPLE_LOGIN, login)
    for name, example in EXAMPLE_ADDRESSES.items():
        if name in addresses:
            out = re.sub(rf"(?<![\d.]){re.escape(example)}(?![\d.])", addresses[name], out)
    return out


def step(name: str, login: str, addresses: dict[str, str], path: Path = GUIDE) -> str:
    steps = guide_steps(path)
    if name not in steps:
        raise GuideError(f"{path}: no lab-step {name!r} (marked: {', '.join(steps) or 'none'})")
    return for_machines(steps[name], login, addresses)
