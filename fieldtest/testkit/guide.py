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
# A marked block may be indented (inside a list item): its lines lose that indentation. Other
# comment lines may stand between the marker and the block (the docs check's not-measured mark).
STEP = re.compile(
    r"^( *)<!-- lab-step: ([a-z0-9-]+) -->\n(?:\1<!-- [^\n]* -->\n)*\1```bash\n(.*?)^\1```",
    re.MULTILINE | re.DOTALL,
)
MARKER = re.compile(r"<!-- lab-step: ([a-z0-9-]+) -->")
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
        indent, name, script = match.groups()
        script = re.sub(rf"^{indent}", "", script, flags=re.MULTILINE)
        if name in steps:
            raise GuideError(f"{path}: lab-step {name!r} is marked twice")
        steps[name] = script
    unplaced = [name for name in MARKER.findall(path.read_text()) if name not in steps]
    if unplaced:
        raise GuideError(f"{path}: lab-step {unplaced[0]!r} is not followed by a ```bash block")
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


def adapted(script: str, changes: list[tuple[str, str, str]], name: str = "step") -> str:
    """``script`` with each ``(guide text, replacement, why)`` applied where the rehearsal cannot run
    the guide's command as it stands (a real Pi's colcon, a real Motive). Each guide text must be
    in the step exactly once: a change to the guide that moves it fails here, not silently."""
    for text, replacement, why in changes:
        found = script.count(text)
        if found != 1:
            raise GuideError(f"lab-step {name}: {text!r} found {found} times (the change: {why})")
        script = script.replace(text, replacement)
    return script


# The keys step (section 6) on the two-machine rehearsal: no broker machine of its own, so the rsync
# to it is left out; its robot is a stock one (the empty namespace), which the guide's keys are for
# as written (tests/test_lab_two_machines.py, tests/test_lab_perf.py).
REHEARSAL_KEYS = [
    (
        "rsync -a --delete ~/fieldtest/keystore-broker/ <broker machine>:fieldtest/keystore/   "
        "# its TLS listener (3.2)\n",
        "",
        "no separate broker machine in the two-machine rehearsal",
    ),
]
