"""The suite's tiers, its parallel groups and the set-ups several test files share.

Tiers: a test is ``fast`` when its file is in FAST_FILES (it starts no program), else ``processes``
(middleware, twin, lab, namespace or tool processes). ``pytest -m fast`` is the developer's quick
run. A fast test that starts a program anyway fails (the program is not started), naming its file,
so the tier cannot drift from what the tests do; a new file is in the processes tier until listed.

Groups: under pytest-xdist (``make test`` runs ``-n 3 --dist loadgroup``) the tests of one
process file run in one worker, one after another, so its module-scoped set-ups are built once
and its fixed ports or names never meet a second copy of itself; files that share a session
set-up below share a group. Fast tests are spread one by one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

# pytester: tests of the suite's own plugins; noskip: a skip or expected failure fails the test
pytest_plugins = ["pytester", "fieldtest.testkit.noskip"]

# Files whose tests start no program (checked by the spawn guard below; the tier is `fast`).
# Every other file is in the `processes` tier: a new file starts there, and moves here once
# `pytest -m fast` would pass with it listed.
FAST_FILES = frozenset(
    {
        "test_analysis_attribution.py",
        "test_analysis_basereceived.py",
        "test_analysis_compare.py",
        "test_analysis_fastbag.py",
        "test_analysis_linkstalls.py",
        "test_analysis_metrics_schema.py",
        "test_analysis_power.py",
        "test_analysis_readerstalls.py",
        "test_analysis_restsplit.py",
        "test_analysis_summarystats.py",
        "test_analysis_sweep.py",
        "test_analysis_synthetic.py",
        "test_analysis_timingclasses.py",
        "test_analysis_umbmark.py",
        "test_bench_reproduction.py",
        "test_bench_robot_traffic.py",
        "test_bench_stack.py",
        "test_bench_twin.py",
        "test_bench_wireless_findings.py",
        "test_campaign.py",
        "test_campaign_resume.py",
        "test_cbuild.py",
        "test_clocksync.py",
        "test_cluster_placement.py",
        "test_compare_validity.py",
        "test_foxglove_layout.py",
        "test_lab_mocap.py",
        "test_lab_preflight_link.py",
        "test_lab_republisher_takes.py",
        "test_lab_robot_setup.py",
        "test_layers.py",
        "test_link_settings.py",
        "test_machine.py",
        "test_middleware_names_stay_home.py",
        "test_middleware_registry.py",
        "test_mocap_capture_time.py",
        "test_mqtt_arrival_stamp.py",
        "test_names.py",
        "test_natnet_protocol.py",
        "test_natnet_recorder.py",
        "test_netem_profiles.py",
        "test_perf_messages.py",
        "test_plan.py",
        "test_qos.py",
        "test_reference_docs.py",
        "test_robot_stats.py",
        "test_rosmsg.py",
        "test_security_policy.py",
        "test_security_zenoh.py",
        "test_stack_validity.py",
        "test_suite_tiers.py",
        "test_testkit_needs.py",
        "test_transport_rosgraph.py",
        "test_twin_base_errors.py",
        "test_twin_create3.py",
        "test_twin_host.py",
    }
)
# Files that share a session set-up run in one worker: the two machines with the robot installed
# from the bundle as the guide says (and this machine's bundle, which test_lab_bundle also
# installs); the real-nodes rehearsals that test_lab_base_record reads again.
SHARED_GROUPS = {
    "test_lab_two_machines.py": "two-machines",
    "test_lab_two_machines_wifi.py": "two-machines",
    "test_lab_bundle.py": "two-machines",
    "test_lab_rehearsal.py": "lab-rehearsal",
    "test_lab_base_record.py": "lab-rehearsal",
}

# Groups that run after the parallel part, alone on the machine (`make test`: `-m alone`, which
# selects nothing while this is empty): a group whose checks another group's load could break. The
# real rclpy nodes' rehearsals run in the parallel part: they judge each command a reader lost by
# that reader's own take times (fieldtest.analysis.metrics.readerstalls), which a load elsewhere
# cannot fool. A test of an alone group marked `beside_others` checks nothing that load could
# change and runs in the parallel part.
ALONE_GROUPS: frozenset[str] = frozenset()

# Longer than the suite's 600 s per test (pyproject.toml) where a test's own commands may take longer;
# a test's time includes the set-ups it is the first to use.
TIMEOUTS_S = {
    "test_install_bare.py": 1800,  # `make install` from an empty cache (its own limit)
    "test_runner.py": 1200,  # the quick demo's own limit is 900 s
    "test_lab_two_machines.py": 1200,  # the bundle's download, then the guide's install steps
    "test_lab_two_machines_wifi.py": 1200,
    "test_lab_two_machines_stock.py": 1200,
    "test_lab_bundle.py": 1200,
    "test_cluster.py": 900,  # the first test also starts the scheduler and three workers
    "test_security_proof.py": 1200,  # its first test runs every scenario (20, three at a time)
}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if name in FAST_FILES:
            item.add_marker(pytest.mark.fast)
        else:
            item.add_marker(pytest.mark.processes)
            group = SHARED_GROUPS.get(name, name)
            item.add_marker(pytest.mark.xdist_group(group))
            if group in ALONE_GROUPS and not item.get_closest_marker("beside_others"):
                item.add_marker(pytest.mark.alone)
        if name in TIMEOUTS_S and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(TIMEOUTS_S[name]))


# ------------------------------------------------------------------------------- the groups' times
_GROUP_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # every phase of every test (on the controller too, under xdist), summed by its xdist work unit
    name = report.nodeid.split("::")[0].rsplit("/", 1)[-1]
    if name in FAST_FILES:
        unit = "the fast tier (spread test by test)"
    else:
        unit = SHARED_GROUPS.get(name, name)
    _GROUP_SECONDS[unit] = _GROUP_SECONDS.get(unit, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """The groups' times: under ``-n 3 --dist loadgroup`` a group runs in one worker, so the largest
    bounds the wall time and the sum over three is what the workers share."""
    if not _GROUP_SECONDS:
        return
    terminalreporter.write_sep("=", "slowest xdist groups (set-up, call and teardown summed)")
    for unit, seconds in sorted(_GROUP_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {unit}")
    terminalreporter.write_line(f"{sum(_GROUP_SECONDS.values()):8.1f}s  every group")


# ---------------------------------------------------------------------------------- the spawn guard
class ProcessInFastTier(RuntimeError):
    """A test of the fast tier tried to start a process."""


_running: list[pytest.Item] = []  # the fast test whose phase is running, if any


def _guarded(start):
    def guard(*args, **kwargs):
        # multiprocessing's own resource tracker (a fork pool's semaphores) is no program of a test's
        if _running and not sys._getframe(1).f_globals.get("__name__", "").startswith("multiprocessing"):
            item = _running[0]
            message = (
                f"{item.path.name} starts a process ({start.__name__}) but is in the fast tier: "
                "take it out of FAST_FILES in tests/conftest.py"
            )
            item.stash.setdefault(_SPAWNS, []).append(message)
            raise ProcessInFastTier(message)
        return start(*args, **kwargs)

    guard.__name__ = start.__name__
    return guard


_SPAWNS = pytest.StashKey[list]()


def pytest_configure(config):
    # every way Python starts a program: subprocess, multiprocessing's spawn, pty, os.system. A bare
    # fork (the analysis's plot worker is a copy of the test process) runs no program and is allowed.
    subprocess._fork_exec = _guarded(subprocess._fork_exec)
    for name in ("forkpty", "posix_spawn", "posix_spawnp", "system"):
        setattr(os, name, _guarded(getattr(os, name)))
    import _posixsubprocess

    _posixsubprocess.fork_exec = _guarded(_posixsubprocess.fork_exec)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("fast"):
        _running.append(item)
    try:
        return (yield)
    finally:
        _running.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    spawns = item.stash.get(_SPAWNS, [])
    if spawns:
        if report.passed:  # the code under test caught the refusal: the test fails all the same
            report.outcome = "failed"
            report.longrepr = spawns[0]
        spawns.clear()
    return report


# ---------------------------------------------------------------------------- shared set-ups
@pytest.fixture(scope="session")
def keystore(tmp_path_factory) -> Path:
    """A kit keystore with the host's and the robot's enclaves, as ``fieldtest keys create`` makes
    it; shared read-only (a test that changes one copies it first)."""
    from fieldtest.security.keystore import KeystoreOptions, create_keystore
    from fieldtest.security.policy import kit_enclave

    options = KeystoreOptions(enclaves=(kit_enclave("host"), kit_enclave("robot")))
    return create_keystore(tmp_path_factory.mktemp("shared") / "keystore", options)


@pytest.fixture(scope="session")
def real_nodes_rehearsal(tmp_path_factory):
    """``rehearsal(distro, cmd_type)``: test_lab_rehearsal's lab trial with the real nodes for that
    distro (its result, the simulated base's status, the runner's messages), run once a session:
    test_lab_base_record analyzes the same trial's base record."""
    done: dict[tuple[str, str], tuple] = {}

    def rehearsal(distro: str, cmd_type: str) -> tuple:
        if (distro, cmd_type) not in done:
            from test_lab_rehearsal import _rehearse

            folder = tmp_path_factory.mktemp(f"rehearsal-{distro}")
            done[distro, cmd_type] = _rehearse(folder, distro=distro, cmd_type=cmd_type)
        return done[distro, cmd_type]

    return rehearsal


@pytest.fixture(scope="session")
def bundle_for(tmp_path_factory):
    """``bundle_for(target)``: `fieldtest lab bundle` for that robot machine (its folder and
    manifest), built once a session from the wheelhouse: test_lab_bundle installs this machine's, and
    test_lab_two_machines gives the same one to its robot when the system python3 is this one's."""
    import json

    from fieldtest.labrun.orchestration.bundle import BundleError, build_bundle
    from fieldtest.testkit.wheelhouse import EmptyWheelhouse, registry_free_pip

    built: dict = {}

    def bundle(target) -> tuple[Path, dict]:
        if target not in built:
            out = tmp_path_factory.mktemp("bundle")
            try:
                with registry_free_pip():  # the wheelhouse `make test` filled: no registry
                    built[target] = out, json.loads(build_bundle(out, target).read_text())
            except (BundleError, EmptyWheelhouse) as exc:
                built[target] = f"the bundle for {target.describe()} cannot be made: {exc}"
        if isinstance(built[target], str):
            pytest.fail(built[target], pytrace=False)
        return built[target]

    return bundle


class _GroupSetups:
    """Set-ups that several files of one group share, built by the first test that asks and closed
    after the group's last test in this worker (its next test is in another group, or there is
    none): a session fixture would keep them, and their processes, running beside the later groups."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[str, contextlib.ExitStack, object]] = {}

    def get(self, item: pytest.Item, name: str, build) -> object:
        if name not in self.open:
            stack = contextlib.ExitStack()
            try:
                value: object = stack.enter_context(build())
            except (Exception, pytest.fail.Exception) as exc:  # the group's later tests fail alike, unbuilt
                value = exc
            self.open[name] = (_group(item), stack, value)
        value = self.open[name][2]
        if isinstance(value, BaseException):
            raise value
        return value

    def close_before(self, nextitem: pytest.Item | None) -> None:
        for name, (group, stack, _) in list(self.open.items()):
            if nextitem is None or _group(nextitem) != group:
                del self.open[name]
                stack.close()


def _group(item: pytest.Item) -> str:
    return SHARED_GROUPS.get(item.path.name, item.path.name)


_GROUP_SETUPS = _GroupSetups()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _GROUP_SETUPS.close_before(nextitem)


def pytest_sessionfinish(session, exitstatus):
    _GROUP_SETUPS.close_before(None)  # a run stopped early (-x, Ctrl-C) closes them too


@pytest.fixture
def two_machines_lab(request, bundle_for):
    """test_lab_two_machines's two machines with the robot set up as the guide says (its
    guide_installed_lab), built once for that file and test_lab_two_machines_wifi (one group)."""
    from test_lab_two_machines import guide_installed_lab

    return _GROUP_SETUPS.get(request.node, "two-machines-guide-lab", lambda: guide_installed_lab(bundle_for))


@pytest.fixture
def dds_domain_zero():
    """DDS domain 0 leased for the test: the shared keystore's governance names domain 0 (the kit's
    default), so its secured participants cannot move to a domain of their own. A trial of another
    test worker that holds it is waited for."""
    import time

    from fieldtest.procs import domains_held_here, lease_dds_domain

    deadline = time.monotonic() + 300
    while (lease := lease_dds_domain(0)).domain_id != 0:
        lease.release()
        if 0 in domains_held_here():
            pytest.fail("DDS domain 0 is held by a lease of this test process itself", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail("DDS domain 0 stayed leased by another run for 5 minutes", pytrace=False)
        time.sleep(0.5)
    yield 0
    lease.release()
