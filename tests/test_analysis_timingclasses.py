"""Command timing in classes (iRobot ros2-performance's late / too late / lost against the command
period) on synthetic trials whose per-command latencies are set, so every class count is known.

Swept: command rates on both sides of the thresholds' min() (4-100 Hz: periods 250 ms to 10 ms),
latency distributions (uniform, a long exponential tail, bimodal), lost and duplicated commands, a
robot clock offset, and latencies at each threshold and one microsecond either side."""

from fractions import Fraction

import numpy as np
import pytest

from fieldtest.analysis import analyze_trial, compare_trials
from fieldtest.analysis.metrics.schema import read_metrics
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.names import STOP_BURST_COUNT
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

RATES_HZ = (4, 10, 20, 40, 50, 60, 100)
DISTRIBUTIONS = ("uniform", "exponential", "bimodal")


def _thresholds_us(rate_hz: int) -> tuple[Fraction, Fraction]:
    """The definition, in exact arithmetic: late > min(0.2 T, 5 ms), too late > min(T, 50 ms)."""
    period_us = Fraction(1_000_000, rate_hz)
    return min(period_us / 5, Fraction(5000)), min(period_us, Fraction(50_000))


def _latencies_us(rate_hz: int, distribution: str, n: int, seed: int) -> dict[int, int]:
    """Whole-microsecond latencies per seq, drawn around the thresholds, and the boundary cases."""
    late, too_late = _thresholds_us(rate_hz)
    rng = np.random.default_rng(seed)
    if distribution == "uniform":
        drawn = rng.uniform(100, 1.5 * float(too_late), n)
    elif distribution == "exponential":
        drawn = 800 + rng.exponential(float(late), n)
    else:  # most commands fast, a tenth held up for about a period
        drawn = np.where(
            rng.random(n) < 0.9, rng.uniform(300, 1500, n), rng.uniform(0.5, 2, n) * float(too_late)
        )
    out = {seq: int(round(v)) for seq, v in enumerate(drawn)}
    boundary = [int(t) + d for t in (late, too_late) for d in (-1, 0, 1)]  # int(): 3333.3 us -> 3333
    out.update({10 + i: v for i, v in enumerate(boundary)})
    return out


def _expected(latency_us: dict[int, int], lost: list[int], rate_hz: int) -> dict[str, int]:
    late, too_late = _thresholds_us(rate_hz)
    arrived = [v for seq, v in latency_us.items() if seq not in lost]
    return {
        "on_time": sum(v <= late for v in arrived),
        "late": sum(late < v <= too_late for v in arrived),
        "too_late": sum(v > too_late for v in arrived),
        "lost": len(lost),
    }


def _spec(rate_hz: int, distribution: str, seed: int, **overrides) -> tuple[SynthSpec, dict[int, int]]:
    plan = SquarePlan(laps=2, side_duration_s=1.5, turn_rate_dps=90.0, command_rate_hz=rate_hz)
    n = plan.n_ticks() + STOP_BURST_COUNT
    latency_us = _latencies_us(rate_hz, distribution, n, seed)
    rng = np.random.default_rng(seed + 1000)
    lost = sorted(int(s) for s in rng.choice(np.arange(20, n), size=max(1, n // 30), replace=False))
    values = {
        "name": f"{distribution}-{rate_hz}hz",
        "plan": plan,
        "mocap_rate_hz": 100.0,
        "latency_of": {seq: v / 1e6 for seq, v in latency_us.items()},
        "lost_seqs": tuple(lost),
        "duplicated": ((16, 0.3),),  # a copy 300 ms later: the first arrival counts
        "clock_offset_s": 0.2371,  # the robot's clock elsewhere: the analysis corrects it
        "seed": seed,
    }
    return SynthSpec(**(values | overrides)), latency_us


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
@pytest.mark.parametrize("rate_hz", RATES_HZ)
def test_every_command_sent_is_in_exactly_its_class(tmp_path, rate_hz, distribution):
    spec, latency_us = _spec(rate_hz, distribution, seed=rate_hz * 7 + len(distribution))
    truth = synthesize(tmp_path / "trial", spec)
    assert sorted(truth.one_way_s) == sorted(set(latency_us) - set(truth.lost_seqs))
    classes = analyze_trial(tmp_path / "trial", plots=False).latency.lateness
    expected = _expected(latency_us, truth.lost_seqs, rate_hz)
    assert {k: getattr(classes, k) for k in expected} == expected
    assert classes.commands == truth.sent == sum(expected.values())
    for name, count in expected.items():
        assert getattr(classes, f"{name}_fraction") == pytest.approx(count / truth.sent, abs=1e-12)
    late, too_late = _thresholds_us(rate_hz)
    assert classes.period_ms == pytest.approx(1000 / rate_hz, abs=1e-9)
    assert classes.late_threshold_ms == pytest.approx(float(late) / 1000, abs=1e-9)
    assert classes.too_late_threshold_ms == pytest.approx(float(too_late) / 1000, abs=1e-9)


@pytest.mark.parametrize("rate_hz", (20, 50, 60))
def test_latencies_at_the_thresholds(tmp_path, rate_hz):
    """Only the boundary cases: at a threshold is not over it, one microsecond more is."""
    late, too_late = _thresholds_us(rate_hz)
    boundary = [int(late) - 1, int(late), int(late) + 1, int(too_late) - 1, int(too_late), int(too_late) + 1]
    # every other command well on time, so the counts are the boundary cases' own
    spec, _ = _spec(rate_hz, "uniform", seed=3, lost_seqs=(), duplicated=())
    latency = dict.fromkeys(range(spec.plan.n_ticks() + STOP_BURST_COUNT), 0.001)
    latency.update({100 + i: v / 1e6 for i, v in enumerate(boundary)})
    spec.latency_of = latency
    synthesize(tmp_path / "trial", spec)
    classes = analyze_trial(tmp_path / "trial", plots=False).latency.lateness
    # late - 1 and late on time; late + 1, too late - 1 and too late late; too late + 1 too late
    assert (classes.late, classes.too_late, classes.lost) == (3, 1, 0)
    assert classes.on_time == classes.commands - 4


@pytest.fixture(scope="module")
def two_configs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lateness-runs")
    truths = {}
    for middleware, distribution in (("dds", "uniform"), ("zenoh-peer", "bimodal")):
        for rep in range(3):
            spec, latency_us = _spec(
                20, distribution, seed=40 + rep, middleware=middleware, repetition=rep, network="wifi"
            )
            spec.name = f"{middleware}-r{rep}"
            truth = synthesize(root / spec.name, spec)
            truths[spec.name] = (truth.sent, _expected(latency_us, truth.lost_seqs, 20))
    return root, truths


def test_report_and_compare_carry_the_classes(two_configs, tmp_path):
    root, truths = two_configs
    result = compare_trials([root], tmp_path / "out")
    rows = {r["middleware"]: r for r in result["rows"]}
    for middleware, row in rows.items():
        sent_counts = [truths[f"{middleware}-r{rep}"] for rep in range(3)]
        late = sorted(100 * c["late"] / sent for sent, c in sent_counts)
        too_late = sorted(100 * c["too_late"] / sent for sent, c in sent_counts)
        assert row["metrics"]["late"]["median"] == pytest.approx(late[1], abs=1e-9)
        assert row["metrics"]["too_late"]["min"] == pytest.approx(too_late[0], abs=1e-9)
        assert row["metrics"]["too_late"]["max"] == pytest.approx(too_late[2], abs=1e-9)
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "late (%) | too late (%) |" in md
    metrics = read_metrics(root / "dds-r0" / "analysis" / "metrics.json")
    sent, counts = truths["dds-r0"]
    lines = report_lines(metrics)
    assert f"| too late | > 50 ms | {counts['too_late']} | {100 * counts['too_late'] / sent:.2f} % |" in lines
    assert f"| lost | never arrived | {counts['lost']} | {100 * counts['lost'] / sent:.2f} % |" in lines


def test_metrics_without_the_classes_still_compare(two_configs, tmp_path):
    """A metrics.json written before the classes existed reads, and compare shows n/a for them."""
    import json
    import shutil

    root, _ = two_configs
    trial = shutil.copytree(root / "dds-r1", tmp_path / "dds-r1")  # the module's trials stay as written
    analyze_trial(trial, plots=False)
    path = trial / "analysis" / "metrics.json"
    data = json.loads(path.read_text())
    data["latency"].pop("lateness")
    path.write_text(json.dumps(data))
    result = compare_trials([trial], tmp_path / "out")
    assert result["trials"][0]["late"] is None and result["rows"][0]["metrics"]["late"]["n"] == 0


def test_one_way_latency_is_exact_to_the_nanosecond(tmp_path):
    """The classes compare latencies to a microsecond; the latencies themselves keep the stamps'
    nanoseconds (as floats, nanoseconds since the epoch are 256 ns apart: the latency was off by up
    to that much before the integer stamps were subtracted first)."""
    import csv

    spec, _ = _spec(20, "uniform", seed=5, lost_seqs=(), duplicated=())
    spec.latency_of = {seq: 0.004 + seq * 1.37e-7 for seq in spec.latency_of}  # sub-microsecond steps
    truth = synthesize(tmp_path / "trial", spec)
    analyze_trial(tmp_path / "trial", plots=False)
    with (tmp_path / "trial" / "analysis" / "latency.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["received"] == "1"]
    errors_ns = [float(r["one_way_ms"]) * 1e6 - truth.one_way_s[int(r["seq"])] * 1e9 for r in rows]
    assert max(abs(e) for e in errors_ns) < 1.0


@pytest.mark.parametrize("qos", ("default", "sensor", "parameters"))
@pytest.mark.parametrize("rate_hz", (10, 20, 50))
def test_loss_while_the_path_held_more_than_the_history_is_told_apart(tmp_path, rate_hz, qos):
    """A lost command k is put down to the QoS history only where the first command received after
    it was still on the path when the host sent k+depth (a KEEP_LAST history can then have
    overwritten k): held that long, or exactly that long, it is; one microsecond less, a path late
    only before k, a fast path, or a KEEP_ALL history: not."""
    from fieldtest.qos import get_qos

    profile = get_qos(qos)
    spec, _ = _spec(rate_hz, "uniform", seed=5, lost_seqs=(), duplicated=(), clock_offset_s=0.0, qos=qos)
    period_us = 1_000_000 // rate_hz
    n = spec.plan.n_ticks()
    latency_us = dict.fromkeys(range(n + STOP_BURST_COUNT), 1000)
    keep_last = profile.history == "keep_last"
    depth = profile.depth if keep_last else 10  # KEEP_ALL: held as long as KEEP_LAST 10 would need
    held, exactly, short, late_before, fast = (30, 31), (70,), (110,), (150,), (190,)
    for seq in range(25, 37):
        latency_us[seq] = (depth + 2) * period_us + 1000  # held beyond the history
    latency_us[71] = (depth - 1) * period_us  # 71 still on the path when 70+depth was sent
    latency_us[111] = (depth - 1) * period_us - 1  # one microsecond less
    for seq in range(140, 150):
        latency_us[seq] = (depth + 2) * period_us  # held, but only the commands before 150
    spec.latency_of = {seq: v / 1e6 for seq, v in latency_us.items()}
    spec.lost_seqs = (*held, *exactly, *short, *late_before, *fast)
    assert n > 190 + depth, "the plan is long enough for every case"
    synthesize(tmp_path / "trial", spec)
    latency = analyze_trial(tmp_path / "trial", plots=False).latency
    assert latency.lost == 6
    if not keep_last:
        assert (latency.lost_to_history_overflow, latency.lost_to_history_overflow_spans) == (0, [])
    else:
        assert latency.lost_to_history_overflow == 3
        assert latency.lost_to_history_overflow_spans == [tuple(held), (70, 70)]
        lines = report_lines(read_metrics(tmp_path / "trial" / "analysis" / "metrics.json"))
        assert any("overwrote them" in line for line in lines)
