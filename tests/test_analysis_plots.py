"""Faults in the record become spans in metrics and plots; plots come out the same with or without
the forked plot worker."""

import os

import pytest
from PIL import Image

from fieldtest.analysis import analyze_trial, plots
from fieldtest.analysis.plotworker import PlotWorker
from fieldtest.plan import SquarePlan
from fieldtest.synth import SynthSpec, synthesize

SHORT = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
START_NS = 1_750_000_000_000_000_000


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    trial = tmp_path_factory.mktemp("faulty") / "trial"
    outage_ticks = range(280, 310)  # 14.0 s .. 15.5 s at 20 Hz
    spec = SynthSpec(
        plan=SHORT,
        stream_start_ns=START_NS,
        lost_seqs=tuple(outage_ticks)[::2],
        faults=[
            {
                "kind": "outage",
                "start_ns": START_NS + 14_000_000_000,
                "duration_s": 1.5,
                "detail": "robot link down",
            },
            {"kind": "profile", "start_s": 20.0, "detail": "wifi-lossy", "node": "robot"},
        ],
    )
    synthesize(trial, spec)
    return trial


def test_faults_are_normalized_and_counted(faulty):
    m = analyze_trial(faulty, plots=False)
    outage, profile = m["faults"]
    assert outage["kind"] == "outage" and outage["start_s"] == pytest.approx(14.0)
    assert outage["end_s"] == pytest.approx(15.5) and outage["open_ended"] is False
    assert profile["open_ended"] is True and profile["node"] == "robot"
    assert profile["end_s"] == pytest.approx(SHORT.total_s)
    stats = m["latency"]["faults"][0]
    assert stats["commands_sent"] == 30 and stats["commands_lost"] == 15
    report = (faulty / "analysis" / "report.md").read_text()
    assert "| outage | 14.00 | 1.50 | robot link down | 30 | 15 |" in report


@pytest.mark.parametrize("worker", ["0", "1"])
def test_plots_with_and_without_the_worker(faulty, tmp_path, monkeypatch, worker):
    monkeypatch.setenv("FIELDTEST_PLOT_WORKER", worker)
    started = []
    original = PlotWorker.start.__func__

    def spy(cls):
        started.append(original(cls))
        return started[-1]

    monkeypatch.setattr(PlotWorker, "start", classmethod(spy))
    m = analyze_trial(faulty, tmp_path / "out")
    if worker == "0" or (os.cpu_count() or 1) < 2:
        assert started == [None]
    else:
        assert isinstance(started[0], PlotWorker)  # the plots really came from the forked worker
    assert m["plots"] == ["trajectory.png", "drift.png", "latency.png"]
    assert not any("plot worker" in w for w in m["warnings"])
    for name in m["plots"]:
        with Image.open(tmp_path / "out" / name) as img:
            assert img.format == "PNG" and img.width >= 800 and img.height >= 500


def _pixels(path):
    with Image.open(path) as img:
        return img.tobytes()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="no plot worker on one core")
@pytest.mark.parametrize("failing", ["worker", "latency fork"])
def test_plots_survive_a_failing_worker(faulty, tmp_path, monkeypatch, failing):
    """A worker that fails early (before it gets the APE) or a latency fork that dies: every plot
    is still drawn, the same as without the worker; only the worker's failure is a warning."""
    monkeypatch.setenv("FIELDTEST_PLOT_WORKER", "0")
    reference = analyze_trial(faulty, tmp_path / "ref")
    monkeypatch.setenv("FIELDTEST_PLOT_WORKER", "1")
    parent = os.getpid()
    if failing == "worker":
        drift_figure = plots.drift_figure

        def broken(data):
            if os.getpid() != parent:
                raise RuntimeError("broken in the worker")
            return drift_figure(data)

        monkeypatch.setattr(plots, "drift_figure", broken)
    else:
        marker, write_latency_plot = tmp_path / "latency-fork-died", plots.write_latency_plot

        def dies_once(out_dir, data):  # the latency fork calls it first; the worker then draws itself
            if os.getpid() != parent and not marker.exists():
                marker.touch()
                os._exit(3)
            return write_latency_plot(out_dir, data)

        monkeypatch.setattr(plots, "write_latency_plot", dies_once)
    m = analyze_trial(faulty, tmp_path / "out")
    assert m["plots"] == reference["plots"]
    warned = [w for w in m["warnings"] if "plot worker" in w]
    assert len(warned) == (failing == "worker")
    assert failing == "worker" or marker.exists()  # the latency fork did die
    for name in m["plots"]:
        assert _pixels(tmp_path / "out" / name) == _pixels(tmp_path / "ref" / name)
