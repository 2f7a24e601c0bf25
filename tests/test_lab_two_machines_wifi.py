"""Loss on the Wi-Fi between the two machines does not end a trial early: `fieldtest lab run` on the
two machines (fieldtest.testkit.twomachines) with the robot's emulated link dropping everything for
1 s, three times while the host streams. The clock probes (robot -> host -> robot) that the host's
lost-robot watchdog (2 s) listens for travel best effort, so a probe lost in an outage is simply
lost and the next one arrives on time. On RELIABLE QoS a lost probe was repaired only at the Fast
DDS writer's next heartbeat (every 3 s) with the later probes held behind it: the watchdog ended
the trial ("robot lost: no clock probe for 2.4 s")."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from fieldtest.labrun.nodelogic.driver import CONTROL_DIR, GO_FILE, ROBOT_LOST_S
from fieldtest.record import CLOCK_OFFSET_TOPIC, read_bag, read_trial
from fieldtest.rosmsg import ns_of

OUTAGE_S = 1.0
OUTAGES_AT_S = (3.0, 9.0, 15.0)  # after the go; the rehearsal campaign's lap streams for 25 s


@pytest.fixture
def lab(two_machines_lab):
    """test_lab_two_machines's machines (tests/conftest.py): a stock robot, the empty namespace, the
    Wi-Fi profile without its loss (the outages are the only loss)."""
    return two_machines_lab


def _wait_for_go(runs: Path, running: threading.Thread, result: dict, timeout_s: float = 180.0) -> int:
    """When the runner sent the go (its file in the host's trial directory), monotonic ns."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running.is_alive():
        if list(runs.glob(f"**/{CONTROL_DIR}/{GO_FILE}")):
            return time.monotonic_ns()
        time.sleep(0.05)
    done = result.get("done")
    ended = f": the runner ended: exit {done.returncode}\n{done.stdout[-2500:]}" if done is not None else ""
    pytest.fail(f"the runner never sent the go{ended}", pytrace=False)


def test_link_outages_do_not_end_a_dds_trial_early(lab):
    campaign = lab.campaign("trials/rehearsal.yaml")
    # the machines are shared: what earlier tests left in the fault log, the link and the base
    faults_before = len(lab.topology.fault_log)
    outage_drops_before = lab.topology.link_stats()["robot"]["a2b"]["drop_outage"]
    commands_before = lab.base_status().get("commands", 0)
    result = {}

    def run() -> None:  # the trial's own record is checked here, not its analysis
        result["done"] = lab.run(campaign, "--no-analyze", runs_dir="runs/outages")

    running = threading.Thread(target=run)
    running.start()
    go_ns = _wait_for_go(lab.host_user.home / "runs" / "outages", running, result)
    for at_s in OUTAGES_AT_S:
        lab.topology.schedule_outage(at_s, OUTAGE_S, node="robot", t0_ns=go_ns)
    running.join(timeout=600)
    done = result["done"]
    report = f"exit {done.returncode}\n{done.stdout[-2500:]}\n{done.stderr[-1500:]}"
    (trial,) = [p.parent for p in (lab.host_user.home / "runs" / "outages").glob("**/trial.yaml")]
    # every outage came and went while the trial ran
    faults = lab.topology.fault_log[faults_before:]
    ends = [f["done_monotonic_ns"] for f in faults if f["event"].startswith("outage end")]
    assert len(ends) == len(OUTAGES_AT_S), faults
    assert lab.topology.link_stats()["robot"]["a2b"]["drop_outage"] > outage_drops_before
    assert done.returncode == 0 and "1/1 trials completed" in done.stdout, report
    assert read_trial(trial).outcome.end_reason == "completed", report
    # the host heard a probe at least every ROBOT_LOST_S while it streamed, and the robot's
    # completed probes (t2: their arrival at the host) show each outage cutting the stream
    host = json.loads((trial / "host_status.json").read_text())
    assert OUTAGE_S <= host["longest_probe_gap_s"] < ROBOT_LOST_S, host
    probes = [m for _, m in read_bag(trial / "robot").messages(CLOCK_OFFSET_TOPIC)]
    arrivals = sorted(ns_of(m.t2) for m in probes)
    gaps = [(b - a) / 1e9 for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert sum(g >= 0.9 * OUTAGE_S for g in gaps) >= len(OUTAGES_AT_S), gaps
    base = lab.base_status()
    assert base["commands"] > commands_before and not base["moving"], base
