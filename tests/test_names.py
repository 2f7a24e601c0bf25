"""Each shared name is defined once (fieldtest/names.py, topics in fieldtest/record/recordnames.py, a
middleware's ports in its family's settings.py)."""

import ast
import re
from pathlib import Path

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
