"""Each shared name is defined once (fieldtest/names.py, topics in fieldtest/record/recordnames.py, a
middleware's ports in its family's settings.py); each module's name is used once; comments cite no
issue numbers of this project."""

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from fieldtest import names
from fieldtest.record import recordnames as record_names

ROOT = Path(__file__).resolve().parents[1]
FAMILY_SETTINGS = sorted((ROOT / "fieldtest/middleware").glob("*/settings.py"))
HOMES = {ROOT / "fieldtest/names.py", ROOT / "fieldtest/record/recordnames.py", *FAMILY_SETTINGS}
SOURCES = [
    p
    for d in ("fieldtest", "host_ws", "robot_ws", "tests", "benchmarks", "analysis")
    for p in (ROOT / d).rglob("*.py")
]
# Quoted enclave paths and the relay topic, as a whole string literal (not inside a longer path).
SHARED_STRINGS = re.compile(
    r"""["']/fieldtest/(host|robot|bridge_host|bridge_robot|mocap|mocap_driver|recorder|rmw_zenoh|router|broker|cmd_vel)["']"""
)
# every module-level *_PORT constant of the homes (NatNet's, and each family's own)
PORT_VALUES = {
    node.value.value
    for home in sorted(HOMES)
    for node in ast.parse(home.read_text()).body
    if isinstance(node, ast.Assign)
    and isinstance(node.value, ast.Constant)
    and any(isinstance(t, ast.Name) and t.id.endswith("_PORT") for t in node.targets)
}


def test_enclave_paths_and_relay_topic_are_written_only_in_the_names_modules():
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in SOURCES
        if path not in HOMES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SHARED_STRINGS.search(line)
    ]
    assert not found, "use fieldtest.names / fieldtest.record.recordnames:\n" + "\n".join(found)


def test_stop_burst_and_ports_are_not_redefined():
    """No module assigns its own stop burst, and no code uses a default port as a bare number."""
    found = []
    for path in SOURCES:
        if path in HOMES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and "STOP_BURST" in target.id:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target.id}")
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value in PORT_VALUES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not found, "use fieldtest.names:\n" + "\n".join(found)


def test_the_names_fit_together():
    assert names.ROLE_ENCLAVES == {"host": names.HOST_ENCLAVE, "robot": names.ROBOT_ENCLAVE}
    assert record_names.RELAY_CMD_VEL_TOPIC.endswith(record_names.CMD_VEL_TOPIC)
    assert names.STOP_BURST_COUNT >= 1 and names.STOP_BURST_SPACING_S > 0


def test_the_port_check_knows_every_default_port():
    from fieldtest.middleware.mqtt.settings import MQTT_PORT, MQTT_TLS_PORT
    from fieldtest.middleware.zenoh.settings import ZENOH_PORT

    assert {
        ZENOH_PORT,
        MQTT_PORT,
        MQTT_TLS_PORT,
        names.NATNET_COMMAND_PORT,
        names.NATNET_DATA_PORT,
    } <= PORT_VALUES


# Module names. A name may repeat only among the middleware family packages
# (fieldtest/middleware/<family>/), where each family's module of one name has the same role, as
# rosbags' per-storage modules do; and a family's transport.py, security.py and wire.py share the
# name of the kit part whose interface they fill (fieldtest.transport, fieldtest.security,
# fieldtest.netem.wire). __init__,
# __main__ and cli (a subcommand's command line) repeat everywhere. Every other module or package
# name is used once in fieldtest/, so a name says which module it is.
REPEATED_EVERYWHERE = frozenset({"__init__", "__main__", "cli"})
FAMILY_ROLES_OF_KIT_PARTS = {"transport": "transport", "security": "security", "wire": "netem/wire.py"}


def repeated_module_names(package: Path) -> list[str]:
    """Each name of a module (file) or package under ``package`` used more than once outside the rule."""
    modules = [path for path in package.rglob("*.py") if path.stem not in REPEATED_EVERYWHERE]
    packages = [path.parent for path in package.rglob("__init__.py") if path.parent != package]
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in modules:
        by_name[path.stem].append(path)
    for path in packages:
        by_name[path.name].append(path)
    families = {path.parent for path in (package / "middleware").glob("*/__init__.py")}

    def in_family(path: Path) -> bool:
        return path.is_file() and path.parent in families

    def allowed(name: str, paths: list[Path]) -> bool:
        others = [path for path in paths if not in_family(path)]
        kit_part = name in FAMILY_ROLES_OF_KIT_PARTS and others == [package / FAMILY_ROLES_OF_KIT_PARTS[name]]
        return not others or kit_part

    return [
        f"{name}: " + ", ".join(sorted(str(path.relative_to(package.parent)) for path in paths))
        for name, paths in sorted(by_name.items())
        if len(paths) > 1 and not allowed(name, paths)
    ]


def test_every_module_name_outside_the_middleware_families_is_used_once():
    repeated = repeated_module_names(ROOT / "fieldtest")
    assert not repeated, "rename to say what each holds:\n" + "\n".join(repeated)


def test_the_module_name_check_sees_a_repeat(tmp_path):
    package = tmp_path / "fieldtest"
    for name in (
        "__init__.py", "cli.py", "lab.py", "names.py", "transport/__init__.py", "transport/base.py",
        "record/__init__.py", "record/names.py", "record/cli.py", "twin/__init__.py", "twin/lab/__init__.py",
        "middleware/__init__.py", "middleware/lab.py",
        *(f"middleware/{family}/{module}" for family in ("dds", "mqtt")
          for module in ("__init__.py", "lab.py", "settings.py", "transport.py")),
    ):  # fmt: skip
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text("")
    assert repeated_module_names(package) == [
        "lab: fieldtest/lab.py, fieldtest/middleware/dds/lab.py, fieldtest/middleware/lab.py, "
        "fieldtest/middleware/mqtt/lab.py, fieldtest/twin/lab",
        "names: fieldtest/names.py, fieldtest/record/names.py",
    ]


# Issue numbers. A comment, docstring or string says what it means, not which of this project's
# issues asked for it: a line may not hold the word issue followed by a number (``#`` optional),
# unless another project's ``owner/repo`` comes right before the word, as in
# ``ros2/rmw_cyclonedds issue 184`` (a citation of that project's tracker).
ISSUE_NUMBER = re.compile(r"(?<![\w/.-])(?:[Ii]ssues?) #?\d", re.ASCII)
OTHER_PROJECTS_ISSUE = re.compile(r"[\w.-]+/[\w.-]+ [Ii]ssues? #?\d", re.ASCII)
CHECKED_DIRS = ("fieldtest", "tests", "benchmarks", "tools")
CHECKED_SUFFIXES = frozenset({".py", ".sh", ".c", ".cpp", ".h", ".md", ".txt", ".yaml", ".json5"})


def project_issue_numbers(root: Path) -> list[str]:
    found = []
    for directory in CHECKED_DIRS:
        for path in sorted((root / directory).rglob("*")):
            if path.suffix not in CHECKED_SUFFIXES or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if len(ISSUE_NUMBER.findall(line)) > len(OTHER_PROJECTS_ISSUE.findall(line)):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


def test_no_comment_cites_this_projects_issue_numbers():
    found = project_issue_numbers(ROOT)
    assert not found, "say what it means instead of the issue number:\n" + "\n".join(found)


def test_the_issue_number_check_tells_this_project_from_others(tmp_path):
    number = 24
    lines = {
        "fieldtest/a.py": f"# stop signals (issue {number})\nx = 1  # see ros2/rmw_cyclonedds issue 184\n",
        "tests/b.py": f'"""Refused first (Issue #{number})."""\n',
        "benchmarks/c.sh": "# pytest-dev/pytest-xdist issue 1386; github.com/o/r/issues/9\n",
        "tools/d.py": f"# create3_sim/x issue 35, and ours: issues {number}\n",
    }
    for name, text in lines.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert project_issue_numbers(tmp_path) == [
        f"fieldtest/a.py:1: # stop signals (issue {number})",
        f'tests/b.py:1: """Refused first (Issue #{number})."""',
        f"tools/d.py:1: # create3_sim/x issue 35, and ours: issues {number}",
    ]


# Options. The commands spell an option one way: ``analyze`` as the command is spelled, and
# ``--no-plots`` for every command that can leave its plots out. An earlier spelling may stay as a
# hidden alias (help=argparse.SUPPRESS) of the same option, so existing scripts still run.
OLD_SPELLINGS = re.compile(r"analyse|^--no-plot$")


class _Built(Exception):
    """Raised by the stand-in ``parse_known_args`` with the parser a command has built."""


def _command_parser(main, argv: list[str]) -> argparse.ArgumentParser:
    def built(parser, args=None, namespace=None):
        raise _Built(parser)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_known_args", built)
        with pytest.raises(_Built) as caught:
            main(argv)
    return caught.value.args[0]


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every ``fieldtest`` command's parser, with its sub-commands', keyed by the words that call it."""
    from fieldtest import cli

    found: dict[str, argparse.ArgumentParser] = {}

    def add(words: str, parser: argparse.ArgumentParser) -> None:
        found[words] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    add(f"{words} {name}", sub)

    # cluster builds its parser after the word worker; lab perf is fieldtest perf's parser
    entries = [[name] for name in cli.SUBCOMMANDS if name != "cluster"] + [
        ["cluster", "worker"],
        ["lab", "perf"],
    ]
    for words in entries:
        add(" ".join(words), _command_parser(cli._load(words[0]), words[1:]))
    return found


def test_the_commands_spell_their_options_one_way():
    old = [
        f"fieldtest {words} {option}"
        for words, parser in command_parsers().items()
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
        if OLD_SPELLINGS.search(option)
    ]
    assert not old, "spell it as the other commands do (the old spelling may stay hidden):\n" + "\n".join(old)


@pytest.mark.parametrize(
    ("words", "argv", "dest"),
    [
        ("predict", ["trace.csv", "--no-plot"], "no_plots"),
        ("lab run", ["campaign.yaml", "--no-analyse"], "no_analyze"),
        ("lab rehearse", ["campaign.yaml", "--no-analyse"], "no_analyze"),
    ],
)
def test_an_earlier_spelling_still_sets_the_option_without_being_shown(words, argv, dest):
    parser = command_parsers()[words]
    assert getattr(parser.parse_args(argv), dest) is True
    assert getattr(parser.parse_args(argv[:1]), dest) is False
    assert not re.search(re.escape(argv[1]) + r"(?![\w-])", parser.format_help())  # not --no-plots
