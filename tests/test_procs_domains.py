"""DDS domain leases: two runs on one machine never share a domain, and a crashed run frees its own."""

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from fieldtest import rosmsg
from fieldtest.procs import (
    DDS_DOMAIN_MAX,
    DOMAIN_LEASE_DIR_ENV,
    DomainsExhaustedError,
    domain_lease_dir,
    domains_held_here,
    lease_dds_domain,
)
from fieldtest.record import CMD_VEL_TOPIC, RECEIPTS_TOPIC, TrialRequest, read_bag, read_trial

HOLDER = r"""
import sys, time
from fieldtest.procs import lease_dds_domain

lease = lease_dds_domain(int(sys.argv[1]))
print(lease.domain_id, flush=True)
time.sleep(60)
"""


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def lease_dir(tmp_path, monkeypatch):
    """A lease directory of this test's own (child processes inherit it): exact ids are then known."""
    folder = tmp_path / "domains"
    monkeypatch.setenv(DOMAIN_LEASE_DIR_ENV, str(folder))
    return folder


def _holder(preferred: int) -> tuple[subprocess.Popen, int]:
    """A separate process holding a lease; returns it and the domain it got."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(preferred)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.wait(5)
        raise AssertionError(f"lease holder exited with code {proc.returncode}")
    return proc, int(line)


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(5)
    proc.stdout.close()


@pytest.mark.parametrize("preferred", [0, 7, DDS_DOMAIN_MAX])
def test_two_processes_asking_for_one_domain_get_different_ones(lease_dir, preferred):
    first, first_id = _holder(preferred)
    second, second_id = _holder(preferred)
    try:
        assert first_id == preferred
        # the next free one, wrapping after 232 past 0, which goes only to a lease that prefers it
        assert second_id == {DDS_DOMAIN_MAX: 1}.get(preferred, preferred + 1)
        with lease_dds_domain(preferred) as third:  # this process too
            assert third.domain_id not in (first_id, second_id)
    finally:
        _kill(first)
        _kill(second)


def test_a_lease_is_free_again_once_its_holder_is_sigkilled(lease_dir):
    holder, held = _holder(42)
    with lease_dds_domain(42) as meanwhile:
        assert meanwhile.domain_id == 43
    _kill(holder)  # no clean-up code runs: the kernel drops the flock with the process
    with lease_dds_domain(42) as after:
        assert after.domain_id == held == 42


def test_leases_in_one_process_exclude_each_other_until_released(lease_dir):
    """``fieldtest demo`` runs its trials as threads of one process."""
    got: list[int] = []
    leases = []
    lock = threading.Lock()

    def take() -> None:
        lease = lease_dds_domain(5)
        with lock:
            leases.append(lease)
            got.append(lease.domain_id)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(got) == list(range(5, 13))
    for lease in leases:
        lease.release()
    with lease_dds_domain(5) as again:
        assert again.domain_id == 5


def test_offsets_lease_every_side_of_a_bridged_trial(lease_dir):
    """A bridged trial's robot side is on domain + 100: nobody else may have that one either."""
    with lease_dds_domain(10, offsets=(0, 100)) as bridged:
        assert bridged.domain_ids == [10, 110]
        with lease_dds_domain(110) as plain:
            assert plain.domain_id == 111
        with lease_dds_domain(200, offsets=(0, 100)) as wrapped:  # robot side (200 + 100) % 233
            assert wrapped.domain_ids == [67, 200]
        with lease_dds_domain(133, offsets=(0, 100)) as past_zero:  # (133 + 100) % 233 is domain 0
            assert past_zero.domain_ids == [1, 134]
    with lease_dds_domain(110) as plain:
        assert plain.domain_id == 110


def test_the_process_knows_which_domains_its_own_leases_hold(lease_dir):
    """A lease this process waits for among its own would never be freed: the suite's domain-0
    fixture fails at once then, instead of waiting out its five minutes."""
    with lease_dds_domain(20, offsets=(0, 100)):
        with lease_dds_domain(30):
            assert {20, 30, 120} <= domains_held_here()
        assert 30 not in domains_held_here() and {20, 120} <= domains_held_here()
    assert not {20, 30, 120} & domains_held_here()


@pytest.mark.parametrize("middleware", ["dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker"])
def test_a_twin_trial_leases_its_domain_and_a_bridged_ones_robot_side(lease_dir, middleware):
    from fieldtest.middleware.zenoh.bridge import side_domain
    from fieldtest.runner.twintrial import QUICK_PLAN, _bridged, _lease_domain, _with_twin_defaults

    request = _with_twin_defaults(
        TrialRequest(name="x", plan=QUICK_PLAN, transport={"middleware": middleware})
    )
    with _lease_domain(request, 20) as lease:
        transport = request.transport.model_copy(update={"domain_id": lease.domain_id})
        sides = {side_domain(transport, "host"), side_domain(transport, "robot")}
        assert lease.domain_id == 20
        assert set(lease.domain_ids) == (sides if _bridged(request) else {20})
        assert _bridged(request) == middleware.startswith("zenoh")  # the twin's Zenoh default


def test_every_domain_taken_and_out_of_range_are_clear_errors(lease_dir):
    with pytest.raises(ValueError, match="out of range 0..232"):
        lease_dds_domain(DDS_DOMAIN_MAX + 1)
    every = [lease_dds_domain(0) for _ in range(DDS_DOMAIN_MAX + 1)]
    try:
        assert sorted(lease.domain_id for lease in every) == list(range(DDS_DOMAIN_MAX + 1))
        with pytest.raises(DomainsExhaustedError, match=f"{lease_dir}: every DDS domain id 0..232 is leased"):
            lease_dds_domain(3)
    finally:
        for lease in every:
            lease.release()


def test_another_user_can_lease_from_the_shared_directory(monkeypatch):
    """One directory per machine for every user: sticky and world-writable like /tmp, lock files
    readable by all; another user's existing lock file opens (no O_CREAT on it: protected_regular)."""
    base = Path(tempfile.mkdtemp(prefix="fieldtest-lease-test-", dir="/tmp"))
    try:
        base.chmod(0o755)  # reachable by another user
        folder = base / "domains"
        monkeypatch.setenv(DOMAIN_LEASE_DIR_ENV, str(folder))
        with lease_dds_domain(3):
            pass
        assert domain_lease_dir() == folder
        assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
        assert stat.S_IMODE((folder / "domain-3.lock").stat().st_mode) == 0o444
        if os.geteuid() != 0:
            return  # cannot become another user to check the rest
        child = "from fieldtest.procs import lease_dds_domain as l; a = l(3); b = l(3); print(a.domain_id, b.domain_id)"
        with lease_dds_domain(3):  # held by root: the other user moves on to 4 (a file it creates) and 5
            done = subprocess.run(
                # the system Python: the kit's venv may sit in root's home; procs needs only the standard library
                [SYSTEM_PYTHON, "-c", child],
                cwd=base,
                capture_output=True,
                text=True,
                user=65534,  # nobody
                group=65534,
                extra_groups=[],
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
                timeout=30,
            )
        assert done.returncode == 0 and done.stdout.split() == ["4", "5"], done.stderr
        with lease_dds_domain(4) as after:  # root opens nobody's file without O_CREAT
            assert after.domain_id == 4
    finally:
        shutil.rmtree(base)


def test_concurrent_twin_trials_on_one_preferred_domain_hear_only_their_own_host(tmp_path):
    """Two trials started at once asking for the same domain (two users' demos, two test runs):
    each robot receives its own host's commands and no other's. On a shared domain each robot
    also logged the other host's commands (old runner: domain 0 for every ``fieldtest trial``)."""
    from concurrent.futures import ThreadPoolExecutor

    from fieldtest.plan import SquarePlan
    from fieldtest.runner import run_twin_trial

    preferred = 150 + os.getpid() % 50
    # two laps with 90 deg/s turns, 16 s of commands: which host each robot heard is checked, not the plan
    plan = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)
    requests = [TrialRequest(name=f"lease-{i}", plan=plan, transport={"middleware": "dds"}) for i in range(2)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(run_twin_trial, r, tmp_path / f"run{i}", domain_id=preferred)
            for i, r in enumerate(requests)
        ]
        results = [f.result() for f in futures]
    domains = []
    for result in results:
        assert result.end_reason == "completed", result.detail
        domains.append(read_trial(result.trial_dir).request.transport.domain_id)
    assert domains[0] != domains[1] and all(preferred <= d <= DDS_DOMAIN_MAX for d in domains), domains
    sent = [_sent_commands(r.trial_dir) for r in results]
    for own, other, result in ((sent[0], sent[1], results[0]), (sent[1], sent[0], results[1])):
        received = _received_commands(result.trial_dir)
        foreign = received & other
        assert not foreign, (
            f"{result.trial_dir.name} received {len(foreign)} commands of the other trial's host"
        )
        assert received <= own and len(received) >= 0.95 * len(own)


def _sent_commands(trial_dir) -> set[tuple[int, int]]:
    """(seq, send time ns) of every command the trial's host published."""
    msgs = read_bag(trial_dir / "host").messages(CMD_VEL_TOPIC)
    return {(rosmsg.seq_of(m.header.frame_id), rosmsg.ns_of(m.header.stamp)) for _, m in msgs}


def _received_commands(trial_dir) -> set[tuple[int, int]]:
    """(seq, send time ns) of every command the trial's robot received."""
    return {(m.seq, rosmsg.ns_of(m.sent)) for _, m in read_bag(trial_dir / "robot").messages(RECEIPTS_TOPIC)}
