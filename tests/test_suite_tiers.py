"""The suite's two tiers (tests/conftest.py): every test is in exactly one, the lists name only files
that exist, and a fast test that starts a program is refused and fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import _SPAWNS, FAST_FILES, SHARED_GROUPS, TIMEOUTS_S, ProcessInFastTier

TESTS = Path(__file__).parent


def test_every_collected_test_is_in_exactly_one_tier(request):
    items = request.session.items
    assert len(items) > 0
    untiered = [
        item.nodeid
        for item in items
        if bool(item.get_closest_marker("fast")) == bool(item.get_closest_marker("processes"))
    ]
    assert untiered == []


def test_the_lists_name_only_test_files_that_exist():
    for name in [*FAST_FILES, *SHARED_GROUPS, *TIMEOUTS_S]:
        assert (TESTS / name).is_file(), f"tests/conftest.py names {name}, which is not in tests/"
    assert FAST_FILES.isdisjoint(SHARED_GROUPS)  # a group is for tests that share a process set-up


def test_a_fast_test_that_starts_a_program_is_refused_and_fails(request):
    assert request.node.get_closest_marker("fast")
    for start in (lambda: subprocess.run(["true"]), lambda: __import__("os").system("true")):
        with pytest.raises(ProcessInFastTier, match="test_suite_tiers.py starts a process .* fast tier"):
            start()
    # the refusals are remembered, so a test whose code catches them fails all the same
    assert len(request.node.stash[_SPAWNS]) == 2
    request.node.stash[_SPAWNS].clear()  # this test's own refusals were expected


def test_under_loadgroup_a_process_files_tests_carry_its_group(request):
    """pytest-xdist groups by a suffix of the node id; a pytest that drops it (9.2,
    pytest-dev/pytest-xdist issue 1386) would spread a file's tests over both workers without a word."""
    if not request.config.getoption("loadgroup", default=False):
        return  # a run without xdist groups (plain pytest): nothing is grouped
    grouped = [item.nodeid for item in request.session.items if item.get_closest_marker("processes")]
    assert grouped and all("@" in nodeid for nodeid in grouped), grouped[:3]
