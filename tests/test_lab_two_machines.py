"""The lab day on two machines: `fieldtest lab run`, the lab's own command, as the lab user on the
host, drives the robot's side over real OpenSSH as the robot's own login (its own home, its own
/opt/ros, no path of the host's clone), across an emulated Wi-Fi link between two network
namespaces, with the simulated Create 3 under <ns>/_do_not_use behind the create3_republisher
stand-in and the NatNet emulator as Motive at a third address (fieldtest.testkit.twomachines)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fieldtest.record import ANALYSIS_DIR, MOCAP_POSE_TOPIC, RECEIPTS_TOPIC, read_bag, read_trial
from fieldtest.testkit import needs

KIT = Path(__file__).resolve().parents[1]
# The rehearsal's nodes run on the ROS 2 wheels' Fast DDS, and rosbag2 is not among the wheels.
NODE_ARGS = ("dds=fastrtps", "record_ros2bag=false")


@pytest.fixture(scope="module")
def lab():
    from fieldtest.testkit.twomachines import TwoMachinesError, missing_tools, two_machines

    needs.netns()
    missing = missing_tools()
    if missing:
        pytest.fail(f"needs {', '.join(missing)}: {needs.INSTALL_HINT}", pytrace=False)
    try:
        with two_machines("wifi", namespace="/tb4", distro="jazzy") as machines:
            yield machines
    except TwoMachinesError as exc:
        pytest.fail(str(exc), pytrace=False)


def lab_campaign(source: str, lab) -> str:
    """A shipped campaign with only its addresses changed, as the guide says (comments kept)."""
    addresses = {
        "host_address": lab.host_address,
        "robot_address": lab.robot_address,
        "router_address": lab.host_address,
        "broker_address": lab.host_address,
    }
    text = (KIT / source).read_text()
    for key, value in addresses.items():
        text, n = re.subn(rf"^(\s*{key}:\s*)\S+", rf"\g<1>{value}", text, flags=re.MULTILINE)
        assert n == 1, f"{source}: {key} not found once"
    name = Path(source).name
    lab.host_user.write(f"campaigns/{name}", text)
    return f"campaigns/{name}"


def lab_run(lab, campaign: str, *extra: str):
    argv = [
        "fieldtest", "lab", "run", campaign, "--yes",
        "--robot", lab.robot_login,
        "--natnet-server", lab.mocap_address, "--natnet-local", lab.host_address, "--natnet-mode", "unicast",
        "--runs-dir", "runs",
        *(f"--host-arg={a}" for a in NODE_ARGS), *(f"--robot-arg={a}" for a in NODE_ARGS),
        *extra,
    ]  # fmt: skip
    return lab.host(argv)


def _trial_dirs(lab, campaign: str) -> list[Path]:
    runs = lab.host_user.home / "runs" / campaign
    return sorted(p for p in runs.iterdir() if (p / "trial.yaml").is_file())


def test_lab_run_drives_the_robot_over_ssh_across_the_emulated_wifi(lab):
    campaign = lab_campaign("trials/rehearsal.yaml", lab)
    packets_before = _link_packets(lab)
    base_before = lab.base_status()
    done = lab_run(lab, campaign)
    report = f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, report
    assert "1/1 trials completed" in done.stdout, report
    (trial,) = _trial_dirs(lab, "rehearsal")
    record = read_trial(trial)
    assert record.outcome.end_reason == "completed", report
    checks = json.loads((trial / "lab" / "preflight.json").read_text())
    assert [c for c in checks if c["severity"] == "fail"] == [], checks
    assert {c["check"] for c in checks if c["severity"] == "ok"} >= {
        "robot-link",
        "clock",
        "mocap",
        "create3",
        "battery",
    }
    # the robot side ran as the robot's login, in its home, reached by key over sshd
    on_robot = lab.robot_home_path(f"fieldtest/trials/{trial.name}")
    assert (on_robot / "robot_status.json").stat().st_uid == lab.robot_user.uid
    assert f"Accepted publickey for {lab.robot_user.name}" in lab.sshd_log()
    # every command and the stop burst reached the robot's link monitor; collected over scp
    n = record.request.plan.n_ticks()
    receipts = [m for _, m in read_bag(trial / "robot").messages(RECEIPTS_TOPIC)]
    assert [r.seq for r in receipts] == list(range(n + 5))
    assert len(read_bag(trial / "mocap").messages(MOCAP_POSE_TOPIC)) > 100
    metrics = json.loads((trial / ANALYSIS_DIR / "metrics.json").read_text())  # analysed as the lab user
    assert metrics, "empty metrics"
    # the base heard them through the republisher (under /tb4/_do_not_use) and drove the square
    base = lab.base_status()
    # (upstream's republisher subscribes best effort with depth 1: a command may be dropped there)
    assert base["commands"] - base_before.get("commands", 0) >= 0.9 * n
    assert base["max_linear_commanded_mps"] == pytest.approx(record.request.plan.linear_speed_mps)
    assert not base["moving"]
    # and the commands crossed the emulated link (not shared memory between the namespaces)
    assert _link_packets(lab) - packets_before > 2 * n, lab.topology.link_stats()


def _link_packets(lab) -> int:
    """Frames the robot's emulated link carried, both ways."""
    robot = lab.topology.link_stats()["robot"]
    return robot["a2b"]["tx"] + robot["b2a"]["tx"]
