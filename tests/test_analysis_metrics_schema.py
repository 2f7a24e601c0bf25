"""metrics.json through its schema (fieldtest.analysis.metrics.schema): what analyze writes fits it, and a
malformed file or an unknown version is one line naming the file."""

import json

import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.schema import METRICS_VERSION, Metrics, MetricsError, read_metrics
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
# Variants that change which sections are filled: complete, stopped early, no ground truth, no receipts.
VARIANTS = {
    "complete": SynthSpec(plan=PLAN, last_lap_shift_m=(0.01, 0.0)),
    "stopped": SynthSpec(plan=PLAN, stop_after_s=5.0),
    "no-mocap": SynthSpec(plan=PLAN, truncate={"mocap": 0.0}),
    "no-receipts": SynthSpec(plan=PLAN, truncate={"robot": 0.0}),
}


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    out = {}
    for name, spec in VARIANTS.items():
        trial = tmp_path_factory.mktemp(name)
        synthesize(trial, spec)
        out[name] = (trial / "analysis" / "metrics.json", analyze_trial(trial, plots=False))
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_what_analyze_writes_reads_back_through_the_schema_unchanged(analyzed, variant):
    path, written = analyzed[variant]
    metrics = read_metrics(path)
    assert isinstance(metrics, Metrics) and metrics.metrics_version == METRICS_VERSION
    # nothing lost or renamed: the model dumps to exactly the file's content
    assert metrics.model_dump(mode="json", exclude_unset=True) == json.loads(path.read_text())
    # analyze returns the typed metrics its readers read from the file
    assert isinstance(written, Metrics) and written == metrics


def test_typed_fields_carry_the_figures(analyzed):
    metrics = read_metrics(analyzed["complete"][0])
    assert metrics.drift.per_lap[-1].mean_m == pytest.approx(0.01, abs=1e-4)
    assert metrics.latency.one_way_ms.count > 0 and metrics.progress.complete and metrics.valid
    assert metrics.config == ("dds", "none", "loopback")


def _broken(tmp_path, analyzed, change) -> str:
    data = json.loads(analyzed["complete"][0].read_text())
    change(data)
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    with pytest.raises(MetricsError) as err:
        read_metrics(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_unknown_or_missing_version_is_refused(tmp_path, analyzed):
    assert "metrics_version 99, this kit reads 1, 2" in _broken(
        tmp_path, analyzed, lambda d: d.update(metrics_version=99)
    )
    assert "metrics_version None" in _broken(tmp_path, analyzed, lambda d: d.pop("metrics_version"))


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d.pop("trial"), "trial: Field required"),
        (lambda d: d["drift"].update(available="maybe"), "drift.available"),
        (lambda d: d["progress"].update(laps_completed="three"), "progress.laps_completed"),
        (lambda d: d["latency"]["one_way_ms"].update(median="fast"), "latency.one_way_ms.median"),
        (lambda d: d.update(stack=[1, 2]), "stack"),
    ],
)
def test_a_malformed_section_names_the_field(tmp_path, analyzed, change, where):
    assert where in _broken(tmp_path, analyzed, change)


def test_not_json_or_missing_is_one_line(tmp_path):
    bad = tmp_path / "metrics.json"
    bad.write_text('{"metrics_version": 1,')
    with pytest.raises(MetricsError, match=f"^{bad}: not JSON"):
        read_metrics(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(MetricsError, match=f"^{bad}: not a metrics object"):
        read_metrics(bad)
    with pytest.raises(MetricsError, match="not readable"):
        read_metrics(tmp_path / "missing.json")


def test_version_1_files_are_still_read(tmp_path, analyzed):
    data = json.loads(analyzed["complete"][0].read_text())
    data["metrics_version"] = 1
    (data.get("stack") or {}).pop("forwarding", None)  # version 1 had no forwarding probe
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    assert read_metrics(path).metrics_version == 1


@pytest.mark.parametrize(
    "probe, row",
    [
        (
            {
                "samples": 400,
                "lost": 2,
                "rtt_p50_ms": 0.61,
                "rtt_p90_ms": 2.4,
                "rtt_p99_ms": 18.3,
                "rtt_max_ms": 39.7,
            },
            "| router/broker forwarding (probe round trip on its node) | p50 0.61 ms, p99 18.30 ms, max 39.70 ms; "
            "2 of 400 lost |",
        ),
        ({"samples": 30, "lost": 30}, "| router/broker forwarding | no probe sample came back (30 sent) |"),
    ],
)
def test_the_forwarding_probe_reaches_metrics_and_the_report(tmp_path, probe, row):
    from fieldtest.record.trial import read_trial, write_trial

    synthesize(tmp_path, VARIANTS["complete"])
    record = read_trial(tmp_path)
    record.outcome.stack["forwarding"] = probe
    write_trial(tmp_path, record)
    analyze_trial(tmp_path, plots=False)
    metrics = read_metrics(tmp_path / "analysis" / "metrics.json")
    assert metrics.stack.forwarding == probe
    assert row in (tmp_path / "analysis" / "report.md").read_text()
