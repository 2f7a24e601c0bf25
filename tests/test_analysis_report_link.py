"""The trial report's "Measured link before the trial" line: one readable sentence, not the record."""

import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.schema import read_metrics
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.netem import measure_link
from fieldtest.netem.topology import LoopbackTopology
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize


def _link_line(tmp_path, link: dict) -> str:
    spec = SynthSpec(plan=SquarePlan(laps=2, side_duration_s=1.5, turn_rate_dps=90.0), link=link)
    synthesize(tmp_path / "t", spec)
    analyze_trial(tmp_path / "t", plots=False)
    lines = report_lines(read_metrics(tmp_path / "t" / "analysis" / "metrics.json"))
    return next(line for line in lines if line.startswith("Measured link before the trial"))


def test_an_emulated_links_record_is_one_readable_line(tmp_path):
    """The record the runner stores on an emulated link (its topology's description and the probe's
    figures), here measured for real over loopback."""
    with LoopbackTopology("wifi", nodes=["host", "robot"], reason="test") as topo:
        link = {"description": topo.describe(), **measure_link(topo, "host", "robot", count=20)}
    line = _link_line(tmp_path, link)
    assert "{" not in line and "'" not in line and len(line) < 300, line
    assert line.startswith("Measured link before the trial: profile wifi (loopback); round trip median ")
    assert f"round trip median {link['rtt_median_ms']:.2f} ms, p99 {link['rtt_p99_ms']:.2f} ms" in line
    assert f"one way there median {link['owd_ab_median_ms']:.2f} ms" in line
    assert line.endswith("; loss 0.00 %; 20 udp-echo probes host -> robot.")


@pytest.mark.parametrize(
    "link, expected",
    [
        ({"profile": "loopback"}, "Measured link before the trial: profile loopback."),
        (
            {"rtt_median_ms": 0.1, "rtt_p99_ms": 0.3, "loss": 0.0},
            "Measured link before the trial: round trip median 0.10 ms, p99 0.30 ms; loss 0.00 %.",
        ),
    ],
)
def test_loopback_and_plain_figures(tmp_path, link, expected):
    assert _link_line(tmp_path, link) == expected
