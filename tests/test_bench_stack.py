"""The stack benchmark's trial order (benchmarks/bench_stack.py): its campaigns are expanded by the
kit's campaign module, interleaved by default, so a few minutes of hypervisor steal cannot fall on
all repetitions of one middleware."""

import importlib.util
import itertools
from pathlib import Path

import pytest

from fieldtest.runner import QUICK_PLAN

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stack.py"
MIDDLEWARES = ["dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker", "mqtt-broker"]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_stack", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _longest_run(requests) -> int:
    return max(len(list(g)) for _, g in itertools.groupby(r.transport.middleware for r in requests))


@pytest.mark.parametrize("reps", [2, 3, 6])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_default_order_never_runs_one_middleware_twice_in_a_row(bench, reps, n):
    args = bench.build_parser().parse_args(["--quick"])
    requests = bench._requests(MIDDLEWARES[:n], reps, QUICK_PLAN, "none-c1", args.order)
    assert len(requests) == n * reps
    assert _longest_run(requests) == 1
    for m in MIDDLEWARES[:n]:
        mine = [r for r in requests if r.transport.middleware == m]
        assert sorted(r.repetition for r in mine) == list(range(reps))
        assert all(r.plan == QUICK_PLAN for r in mine)
    assert len({r.name for r in requests}) == len(requests)


def test_grouped_order_is_still_available_for_comparison(bench):
    requests = bench._requests(MIDDLEWARES, 3, QUICK_PLAN, "none-c1", "grouped")
    assert _longest_run(requests) == 3
    assert [r.transport.middleware for r in requests[:3]] == ["dds"] * 3
