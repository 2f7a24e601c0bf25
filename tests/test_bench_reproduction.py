"""The reproduction table's logic (benchmarks/bench_reproduction.py): intervals over repetitions,
directions computed from the seed's and the kit's figures, rows paired by repetition."""

import importlib.util
import math
import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_reproduction.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_reproduction", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _rec(status="ok", rep=0, subscribers=None, kinds=None, **figures):
    return {"case": "x", "rep": rep, "status": status, "error": "" if status == "ok" else "refused: rate",
            "figures": figures if status == "ok" else {}, "subscribers": subscribers or [{}],
            "traffic": {"kinds": kinds} if kinds else {}, "simulator": {},
            "load": {"loadavg_1min": 1.0, "core_busy_percent": [50.0, 50.0], "steal_percent": 0.0}}  # fmt: skip


def _t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


@pytest.mark.parametrize(
    "values", [[1.0, 2.0, 3.0], [10.0, 12.0, 11.0, 13.0, 9.0], [float(i % 7) for i in range(40)]]
)
def test_mean_interval_is_student_t(bench, values):
    iv = bench.mean_interval(values)
    n = len(values)
    assert (iv.mean, iv.n) == (pytest.approx(statistics.fmean(values)), n)
    assert iv.high - iv.mean == pytest.approx(
        _t975(n - 1) * statistics.stdev(values) / math.sqrt(n), rel=1e-9
    )
    assert iv.mean - iv.low == pytest.approx(iv.high - iv.mean)


def test_mean_interval_of_one_value_none_and_missing(bench):
    assert bench.mean_interval([4.0]).low == bench.mean_interval([4.0]).high == 4.0
    assert bench.mean_interval([]) is None
    assert bench.mean_interval([2.0, math.nan, 4.0, None]).n == 2


def test_ratios_average_on_a_log_scale(bench):
    iv = bench.ratio_interval([2.0, 0.5, 1.0])  # logs ln2, -ln2, 0: mean 0, sd ln2
    assert iv.mean == pytest.approx(1.0)
    assert iv.high == pytest.approx(math.exp(_t975(2) * math.log(2) / math.sqrt(3)), rel=1e-9)
    assert iv.low == pytest.approx(1 / iv.high)  # symmetric in log, never below 0
    assert bench.ratio_interval([26.0, 84.5, 22.0]).low > 1  # one stalled repetition cannot flip the sign
    assert bench.mean_interval([26.0, 84.5, 22.0]).low < 0
    assert bench.ratio_interval([0.0, -1.0]) is None


@pytest.mark.parametrize(
    ("low", "high", "tolerance", "expected"),
    [(1.2, 1.5, 0.0, 1), (0.5, 0.9, 0.0, -1), (0.9, 1.1, 0.0, 0), (1.01, 1.04, 0.05, 0), (1.06, 1.2, 0.05, 1),
     (0.8, 0.94, 0.05, -1)],
)  # fmt: skip
def test_direction_against_the_no_effect_band(bench, low, high, tolerance, expected):
    assert bench.direction(low, high, 1.0, tolerance) == expected


def test_reproduced_needs_the_kit_interval_on_the_seed_side(bench):
    Interval = bench.Interval
    assert bench.reproduced(1, Interval(2.0, 1.5, 2.5, 3), 1.0)
    assert not bench.reproduced(1, Interval(1.1, 0.9, 1.3, 3), 1.0)  # the interval reaches 1
    assert not bench.reproduced(1, Interval(0.7, 0.6, 0.8, 3), 1.0)
    assert bench.reproduced(-1, Interval(0.7, 0.6, 0.8, 3), 1.0)
    assert bench.reproduced(0, Interval(1.02, 0.99, 1.04, 3), 1.0, 0.05)  # no effect, as the seed found
    assert not bench.reproduced(0, Interval(1.3, 1.2, 1.4, 3), 1.0, 0.05)
    assert not bench.reproduced(1, None, 1.0)


def _ratio_finding(bench, seed_value):
    return bench.Finding("T", "seed", "Table", "a over b", "", seed_value, ["a", "b"], bench.ratio(bench.RTT))


@pytest.mark.parametrize("seed_value", [3.0, 0.4])
@pytest.mark.parametrize("kit_factor", [3.0, 0.4])
def test_verdict_follows_the_figures(bench, seed_value, kit_factor):
    reps = {"a": [_rec(rep=i, **{bench.RTT: kit_factor * b}) for i, b in enumerate((10.0, 12.0, 11.0))],
            "b": [_rec(rep=i, **{bench.RTT: b}) for i, b in enumerate((10.0, 12.0, 11.0))]}  # fmt: skip
    verdict = bench.judge(_ratio_finding(bench, seed_value), reps)
    assert verdict.kit.mean == pytest.approx(kit_factor)
    assert verdict.reproduced == ((seed_value > 1) == (kit_factor > 1))
    line = bench.table(reps, [_ratio_finding(bench, seed_value)])[-1]
    assert f"| {'yes' if verdict.reproduced else 'no'} |" in line


def test_repetitions_are_paired_and_incomplete_ones_dropped(bench):
    reps = {"a": [_rec(**{bench.RTT: 2.0}), _rec(**{bench.RTT: 9.0}), _rec(**{bench.RTT: 4.0})],
            "b": [_rec(**{bench.RTT: 1.0}), _rec(**{bench.RTT: 3.0})]}  # fmt: skip
    assert bench.paired(reps, ["a", "b"], bench.ratio(bench.RTT)) == [2.0, 3.0]
    reps["b"][1] = _rec("failed")  # a failed row gives no ratio
    assert bench.paired(reps, ["a", "b"], bench.ratio(bench.RTT)) == [2.0]


def _judged(bench, rep: int, rtt_ms: float, lag_p99_ms: float) -> dict:
    """A perf row on the ns-3 link judged by judge_row, recorded as the benchmark records it."""
    from types import SimpleNamespace

    from fieldtest.perf.case import PerfCase, PerfRow, judge_row

    lag = {"samples": 30000, "p50": 0.05, "p90": 0.2, "p99": lag_p99_ms, "max": 2 * lag_p99_ms}
    link = {"emulated": True, "simulator": {"lag_ms": lag, "lag_bound_ms": 2.0}}
    row = judge_row(PerfRow(PerfCase(network="wifi-80211"), figures={bench.RTT: rtt_ms}, link=link))
    load = SimpleNamespace(loadavg_1min=1.0, core_busy_percent=[50.0, 50.0], steal_percent=0.0)
    return bench.record_row("a", rep, row, load)


def test_a_row_whose_simulator_fell_behind_is_kept_but_left_out_of_the_verdict(bench):
    """414 ms at p99: the simulator's lag behind rows a table once called reproduced."""
    reps = {"a": [_judged(bench, i, 4.0, 0.3) for i in range(3)] + [_judged(bench, 3, 400.0, 414.0)],
            "b": [_rec(rep=i, **{bench.RTT: 10.0}) for i in range(4)]}  # fmt: skip
    assert [r["valid"] for r in reps["a"]] == [True, True, True, False]
    assert "lag p99 414.0 ms" in reps["a"][3]["invalid_reasons"][0]
    verdict = bench.judge(_ratio_finding(bench, 3.0), reps)
    assert verdict.values == [0.4, 0.4, 0.4] and not verdict.reproduced
    assert bench.case_summary(reps["a"][3:]).startswith("invalid (1 of 1 rows): the ns-3 802.11 link")


def test_a_refused_pair_delivers_nothing_so_the_failure_finding_is_not_reproduced(bench):
    finding = next(f for f in bench.FINDINGS if f.key == "Z8")
    both_refused = {c: [_rec("refused", rep=i) for i in range(3)] for c in finding.cases}
    verdict = bench.judge(finding, both_refused)
    assert (verdict.kit.mean, verdict.reproduced) == (0.0, False)
    zenoh, dds = finding.cases
    carried = {zenoh: [_rec(rep=i, relative_loss=0.0) for i in range(3)], dds: both_refused[dds]}
    assert bench.judge(finding, carried).reproduced


def test_a_row_that_sent_and_then_failed_counts_what_it_delivered(bench):
    late = _rec(relative_loss=0.25)
    late["status"] = "failed"  # rate not held: it sent, the link blocked it
    assert bench.delivered(late) == pytest.approx(0.75)
    assert bench.delivered(_rec("refused")) == 0.0


def test_overhead_share_counts_datagrams_not_fragments(bench):
    kinds = {k: {"packets": 0} for k in ("user_data", "heartbeat_acknack", "ip_fragment", "spdp")}
    kinds["user_data"]["packets"], kinds["heartbeat_acknack"]["packets"] = 30, 10
    kinds["ip_fragment"]["packets"] = 500
    assert bench.overhead_share(_rec(kinds=kinds)) == pytest.approx(0.25)


def test_fan_out_adds_the_mean_of_every_subscriber(bench):
    one = _rec(**{bench.OW: 1.0})
    four = _rec(subscribers=[{bench.OW: v} for v in (1.0, 11.0, 21.0, 31.0)], **{bench.OW: 1.0})
    assert bench.fan_out_added(one, four) == pytest.approx(15.0)


def test_same_order_and_seed_directions_come_from_the_figures(bench):
    assert bench.same_order({"a": 1, "b": 2, "c": 3}, {"a": 10, "b": 20, "c": 30})
    assert not bench.same_order({"a": 1, "b": 2, "c": 3}, {"a": 10, "b": 40, "c": 30})
    by_key = {f.key: f for f in bench.FINDINGS}
    assert by_key["Z7"].expected == -1  # DDS 58.80 ms under Zenoh 72.11 ms on 4G
    assert by_key["Z4"].expected == 1
    assert by_key["R1"].expected == 0  # 23 / 23 us
    assert by_key["C1"].expected == -1  # stated, no figure
    assert set(bench.needed_cases(bench.FINDINGS)) <= set(bench.CASES)


def test_runs_merge_with_the_later_file_winning(bench, tmp_path):
    import json

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    meta = {
        "reps": 3,
        "rate_hz": 10.0,
        "duration_s": 10.0,
        "started": "2026-11-29 05:34 UTC",
        "ended": "2026-11-29 06:04 UTC",
        "missing": ["x rep 2"],
        "command": "bench_reproduction.py --only fastdds --json a.json",
    }
    first.write_text(json.dumps({"meta": meta, "results": {"a": [_rec(**{bench.RTT: 1.0})], "b": []}}))
    meta2 = {**meta, "started": "2026-11-29 01:36 UTC", "ended": "2026-11-29 02:34 UTC", "missing": []}
    second.write_text(json.dumps({"meta": meta2, "results": {"b": [_rec(**{bench.RTT: 2.0})]}}))
    results, merged = bench.merged_runs([first, second])
    assert set(results) == {"a", "b"} and results["b"][0]["figures"][bench.RTT] == 2.0
    assert merged["missing"] == ["x rep 2"]
    assert (
        merged["started"]
        == "2026-11-29 05:34 UTC to 2026-11-29 06:04 UTC; 2026-11-29 01:36 UTC to 2026-11-29 02:34 UTC"
    )
    # measured when the latest run ended, not when the table was written again
    assert merged["measured_utc"] == "2026-11-29T06:04:00Z"
    assert "command" not in merged  # the whole run's command reproduces it, not one part's
    second.write_text(json.dumps({"meta": {**meta2, "ended": "late"}, "results": {}}))
    with pytest.raises(SystemExit, match=f"{second}: meta.ended 'late'"):
        bench.merged_runs([first, second])


def test_the_saturation_rows_send_as_fast_as_accepted_and_only_they(bench):
    from fieldtest.perf.run import SATURATION, check_case

    assert bench.SATURATED_RATE == SATURATION
    for name in bench.SATURATION_CASES:
        case = bench.perf_case(name, 10.0, 5.0)
        seed_network = "loopback" if name.startswith("fern-sat-fastdds") else "ethernet"
        assert case.saturated and case.mode == "one-way" and case.network == seed_network, name
        check_case(case)  # runnable: not refused as a round trip or for the link's rate
    assert {bench.CASES[n]["security"] for n in bench.SATURATION_CASES} == {"none", "sros2"}
    assert bench.perf_case("fern-1-d", 10.0, 5.0).rate_hz == 10.0  # the other rows keep the script's rate
    by_key = {f.key: f for f in bench.FINDINGS}
    assert by_key["F2s"].expected == -1 and by_key["K2s"].expected == -1 and by_key["K3s"].expected == 1
    assert by_key["F6s"].expected == 1
    assert set(bench.needed_cases(bench.FINDINGS)) <= set(bench.CASES)


def test_kim_cost_growth_compares_the_smallest_size_with_the_largest(bench):
    thr = bench.THR
    sizes = [(100.0, 60.0), (100.0, 45.0), (100.0, 30.0)]  # (none, sros2) per size, smallest first
    recs = [_rec(**{thr: v}) for pair in sizes for v in pair]
    assert bench.throughput_cost_growth(*recs) == pytest.approx(0.6 - 0.3)
    finding = next(f for f in bench.FINDINGS if f.key == "K3s")
    reps = {c: [_rec(rep=i, **{thr: r[thr] * (1 + 0.01 * i)}) for i in range(3)] for c, r in
            zip(finding.cases, (x["figures"] for x in recs), strict=True)}  # fmt: skip
    assert bench.judge(finding, reps).reproduced
    assert bench.loss_gain(_rec(relative_loss=0.02), _rec(relative_loss=0.15)) == pytest.approx(13.0)


def test_a_saturation_row_shows_its_offered_and_delivered_rates(bench):
    rec = _rec(**{"throughput_sent (msg/s)": 900.0, "throughput_received (msg/s)": 800.0,
                  "throughput_received (MB/s)": 0.8, "cpu_usage (%)": 95.0, bench.OW: 1.0})  # fmt: skip
    rec["case"] = "kim-sat-none-Array1k"
    summary = bench.case_summary([rec])
    assert "offered 900 msg/s, delivered 800 msg/s = 0.8 MB/s, sender CPU 95 %" in summary


def test_the_heading_names_the_saturation_rows_rate(bench):
    by_key = {f.key: f for f in bench.FINDINGS}
    meta = {"rate_hz": 10.0}
    assert bench.rate_heading([by_key["K3s"]], meta) == "max rate (saturation)"
    assert bench.rate_heading([by_key["Z1"]], meta) == "10 Hz"
    assert bench.rate_heading([by_key["Z1"], by_key["F2s"]], meta) == "10 Hz (the saturation rows: max rate)"


def test_rti_cost_order_covers_every_rti_mirror(bench):
    """RTI perftest's five protected rows at 16 KB, cheapest first (the seed's figures), each a kit
    setting with its rows; the kit's order is read from its own medians."""
    from fieldtest.security.governance import GOVERNANCE_PROFILES

    seed_order = sorted(bench.RTI_16K, key=bench.RTI_16K.__getitem__)
    assert seed_order == ["rtps-sign", "rtps-encrypt", "sign-submessage-encrypt", "origin-auth-encrypt",
                          "sign-submessage-origin-encrypt-data"]  # fmt: skip
    assert set(bench.RTI_PROTECTED) == set(bench.RTI_1K) == set(bench.RTI_16K) <= set(GOVERNANCE_PROFILES)
    assert {f"rti-{s}-{m}" for s in bench.RTI_PROTECTED for m in ("Array1k", "Array16k")} <= set(bench.CASES)
    r4 = next(f for f in bench.FINDINGS if f.key == "R4")
    assert r4.seed_value == pytest.approx((8 + 11 + 17 + 19 + 28) / 5 - (4 + 4 + 7 + 9 + 12) / 5)
    assert {f"rti-{s}-{m}" for s in bench.RTI_PROTECTED for m in ("Array1k", "Array16k")} <= set(r4.cases)

    def reps(order):  # median round trips rising in ``order``: 0.8, 0.82, ... ms
        return {f"rti-{s}-Array16k": [_rec(**{bench.RTT50: 0.8 + 0.02 * i})] for i, s in enumerate(order)}

    line = bench.order_line(reps(seed_order))
    assert "same order: yes" in line and "sign-submessage-origin-encrypt-data 440 us" in line
    assert "same order: no" in bench.order_line(reps([*seed_order[:3], *seed_order[:2:-1]]))
    partial = reps(seed_order)
    del partial["rti-sign-submessage-origin-encrypt-data-Array16k"]
    assert "not every setting has a figure" in bench.order_line(partial)


def test_rti_cost_order_is_not_claimed_within_the_repetitions_spread(bench):
    """Point means in the seed's order are no order while each setting's repetitions reach past its
    neighbour's: 0.8, 0.82, ... ms with a second repetition 0.05 ms higher."""
    seed_order = sorted(bench.RTI_16K, key=bench.RTI_16K.__getitem__)
    spread = {
        f"rti-{s}-Array16k": [_rec(**{bench.RTT50: 0.8 + 0.02 * i}), _rec(**{bench.RTT50: 0.85 + 0.02 * i})]
        for i, s in enumerate(seed_order)
    }
    line = bench.order_line(spread)
    assert "same order: not resolved" in line and "rtps-sign 412 us (400-425)" in line
    apart = {k: [v[0]] for k, v in spread.items()}
    assert "same order: yes" in bench.order_line(apart)


def test_the_reference_summary_renders_the_tables_rows_and_counts_the_verdicts(bench, tmp_path):
    """docs/benchmarks.md's table is rendered from reference/bench-reproduction.json: a finding's row
    read back from the summary gives the bench's own line, and the count is computed from the rows."""
    from fieldtest.record.reference import read_reference, write_reference
    from fieldtest.testkit.docblocks import reproduction_counts, reproduction_table

    reps = {"a": [_rec(rep=i, **{bench.RTT: 3.0 * b}) for i, b in enumerate((10.0, 12.0, 11.0))],
            "b": [_rec(rep=i, **{bench.RTT: b}) for i, b in enumerate((10.0, 12.0, 11.0))]}  # fmt: skip
    findings = [_ratio_finding(bench, 3.0), _ratio_finding(bench, 0.4)]
    rows = [bench.finding_row(f, reps) for f in findings]
    summary = bench.ReproductionSummary(
        kind="reproduction", name="r", command="benchmarks/x.py", measured_utc="now", machine="m",
        versions={"python": "3"}, settings={}, rows=rows,
    )  # fmt: skip
    back = read_reference(write_reference(tmp_path / "r.json", summary))
    assert reproduction_table(back.rows) == bench.table(reps, findings)
    assert [r.reproduced for r in back.rows] == [True, False]
    assert reproduction_counts(back.rows).startswith("Reproduced: 1 of 2 findings (seed 1 of 2): T.")


def test_every_fast_dds_row_is_its_cyclonedds_row_on_fast_dds_and_the_seeds_network(bench):
    """Fernandez's rows move to loopback, as the seed ran; Chen's to Chen's radio; nothing else
    changes from the CycloneDDS row (size, QoS, security, mode, subscribers, saturation)."""
    networks = {"fern": "loopback", "kim": "ethernet", "chen": "wifi-80211a-adhoc"}
    for name, (cyclone, _) in bench.FASTDDS_OF.items():
        if name in bench.FASTDDS_CAPTURED:  # F5's capture: on the CycloneDDS rows' ethernet
            assert bench.CASES[name] == {**bench.CASES[cyclone], "middleware": "fastdds"}
            continue
        row, base = bench.CASES[name], bench.CASES[cyclone]
        assert row["middleware"] == "fastdds" and base["middleware"] == "dds", name
        assert {k: v for k, v in row.items() if k not in ("middleware", "network")} == {
            k: v for k, v in base.items() if k not in ("middleware", "network")
        }, name
        assert row["network"].startswith(networks[name.split("-")[0]]), name
        assert (name in bench.SATURATION_CASES) == (cyclone in bench.SATURATION_CASES), name
    assert bench.CASES["fern-1-a"]["network"] == "ethernet"  # the CycloneDDS rows stay as they were


def test_fast_dds_findings_keep_the_seeds_figures_and_metric(bench):
    by_key = {f.key: f for f in bench.FINDINGS}
    fast = [f for f in bench.FINDINGS if f.key.endswith("-fastdds")]
    assert {f.key.removesuffix("-fastdds") for f in fast} == {
        "F1", "F2", "F3", "F4", "F5", "F5e", "F6", "F2s", "F6s", "K1", "K2", "K2s", "K3s", "C1", "C2", "C3", "C4",
    }  # fmt: skip
    assert bench.not_measurable(by_key["F5e-fastdds"]) == ""  # the seed's metric, where it can be taken
    for finding in fast:
        seed = by_key[finding.key.removesuffix("-fastdds").replace("F5e", "F5")]
        beside = 2 if finding.key.startswith("F5e") else 1  # after F5 and F5-fastdds
        assert bench.FINDINGS.index(finding) == bench.FINDINGS.index(seed) + beside
        assert (finding.seed_text, finding.seed_value, finding.kit, finding.unit, finding.expected) == (
            seed.seed_text, seed.seed_value, seed.kit, seed.unit, seed.expected,
        )  # fmt: skip
        assert all(bench.CASES[c]["middleware"] == "fastdds" for c in finding.cases)
        assert bench.finding_row(finding, {}).kit_middleware == "Fast DDS"
    assert [f.key for f in bench._select(["fastdds"])] == [f.key for f in fast]


def test_a_capture_figure_over_loopback_is_not_measurable_and_says_why(bench):
    by_key = {f.key: f for f in bench.FINDINGS}
    reason = bench.not_measurable(by_key["F5-fastdds"])
    assert "capture" in reason and "`fern-fastdds-1-c` " in reason.replace(",", " ") and "loopback" in reason
    assert bench.not_measurable(by_key["F5"]) == ""  # the ethernet rows are captured
    assert bench.not_measurable(by_key["F1-fastdds"]) == ""  # latency needs no capture
    row = bench.finding_row(by_key["F5-fastdds"], {"fern-fastdds-1-a": [_rec(relative_loss=0.0)]})
    assert row.verdict == f"not measurable here: {reason}" and not row.reproduced


def test_a_refused_row_leaves_its_finding_not_measurable_unless_refusal_is_the_figure(bench):
    """Zhang's 256 KB on 4G is refused for the link's rate: for Z8 that is the figure (nothing
    delivered); a latency over the same rows could not be taken."""
    z8 = next(f for f in bench.FINDINGS if f.key == "Z8")
    assert bench.not_measurable(z8) == ""
    latency = bench.replace(z8, kit=bench.ratio(bench.RTT))
    assert bench.not_measurable(latency).startswith("`4g-zenoh-256k` refused: rate: Array256k at 10 Hz")
    assert bench.not_measurable(latency, rate_hz=1.0) == ""  # the rate decides, not the row's name


def test_findings_without_data_render_as_not_run_in_the_scripts_order(bench):
    from fieldtest.testkit.docblocks import reproduction_counts, with_pending_findings

    findings = [f for f in bench.FINDINGS if f.key in ("F1", "F1-fastdds", "F5-fastdds")]
    pending = [bench.finding_row(f, {}) for f in findings]
    assert [r.verdict for r in pending[:2]] == ["not run", "not run"]
    measured = bench.finding_row(findings[0], {c: [_rec(**{bench.OW: 1.0})] for c in findings[0].cases})
    gone = bench.replace(findings[0], key="F0")  # a finding the script no longer has stays, last
    merged = with_pending_findings([bench.finding_row(gone, {}), measured], pending)
    assert [r.key for r in merged] == ["F1", "F1-fastdds", "F5-fastdds", "F0"]
    assert merged[0] is measured and merged[0].verdict == ""
    counts = reproduction_counts(merged)
    assert "of 1 findings" in counts and "Not measurable here: F5-fastdds." in counts
    assert "Not run yet: F1-fastdds, F0." in counts


def test_the_capture_shows_rtps_datagrams_by_kind_and_their_size(bench):
    kinds = {"user_data": {"packets": 10, "bytes": 3000}, "heartbeat_acknack": {"packets": 4, "bytes": 400},
             "rtps_protected": {"packets": 0, "bytes": 0}}  # fmt: skip
    text = bench.rtps_packets([_rec(kinds=kinds), _rec(kinds=kinds)])
    assert text == "capture per repetition: user_data 10 (300 B each), heartbeat_acknack 4 (100 B each)"
    assert bench.rtps_packets([_rec()]) == ""


def test_a_row_whose_link_carried_nothing_leaves_a_loss_finding_not_measurable(bench):
    """Chen's radio past its range: no relay answers, so the row has no loss to compare; where
    nothing delivered is the figure (Z5) the same row counts as such."""
    from fieldtest.perf.run import NO_LINK

    silent = {**_rec("failed"), "error": f"relay(s) [1] {NO_LINK} in 20 s of warm-up pings: no link"}
    by_key = {f.key: f for f in bench.FINDINGS}
    c2 = by_key["C2-fastdds"]
    reps = {c2.cases[0]: [silent], c2.cases[1]: [_rec(relative_loss=0.1)]}
    verdict = bench.finding_row(c2, reps).verdict
    assert verdict.startswith("not measurable here: no link, `chen-fastdds-default-27m` never reached")
    assert "wifi-80211a-adhoc-27m" in verdict
    crashed = {**silent, "error": "main exited with code 1"}
    assert bench.finding_row(c2, {**reps, c2.cases[0]: [crashed]}).verdict == ""
    z5 = by_key["Z5"]
    assert (
        bench.finding_row(z5, {z5.cases[0]: [_rec(relative_loss=0.0)], z5.cases[1]: [silent]}).verdict == ""
    )
