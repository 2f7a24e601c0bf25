"""Faults in the record become spans in metrics and plots; plots come out the same with or without
the forked plot worker."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.schema import as_json
from fieldtest.analysis.rendering import trialplots as plots
from fieldtest.analysis.rendering.figuredata import PlotData
from fieldtest.analysis.rendering.plotprocess import PlotWorker
from fieldtest.plan import SquarePlan
from fieldtest.testkit import needs
from fieldtest.testkit.synth import SynthSpec, synthesize

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
    outage, profile = m.faults
    assert outage.kind == "outage" and outage.start_s == pytest.approx(14.0)
    assert outage.end_s == pytest.approx(15.5) and outage.open_ended is False
    assert profile.open_ended is True and profile.model_extra == {"node": "robot"}
    assert profile.end_s == pytest.approx(SHORT.total_s)
    stats = m.latency.faults[0]
    assert stats.commands_sent == 30 and stats.commands_lost == 15
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
    assert m.plots == ["trajectory.png", "drift.png", "latency.png"]
    assert not any("plot worker" in w for w in m.warnings)
    for name in m.plots:
        with Image.open(tmp_path / "out" / name) as img:
            assert img.format == "PNG" and img.width >= 800 and img.height >= 500


def _pixels(path):
    with Image.open(path) as img:
        return img.tobytes()


def test_worker_draws_the_same_pixels(faulty, tmp_path):
    """In a fresh process the worker imports matplotlib its own way (plotprocess._import_plots): the
    pictures must not change."""
    needs.cores(2)  # the worker starts only with two
    out = {}
    for worker in ("0", "1"):
        out[worker] = tmp_path / worker
        env = dict(os.environ, FIELDTEST_PLOT_WORKER=worker)
        cmd = [sys.executable, "-m", "fieldtest.cli", "analyze", str(faulty), "--out", str(out[worker])]
        subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=120)
    assert not any(
        "plot worker" in w for w in json.loads((out["1"] / "metrics.json").read_text())["warnings"]
    )
    for name in ("trajectory.png", "drift.png", "latency.png"):
        assert _pixels(out["1"] / name) == _pixels(out["0"] / name)


@pytest.mark.parametrize("failing", ["raises", "dies", "latency fork dies"])
def test_plots_survive_a_failing_worker(faulty, tmp_path, monkeypatch, failing):
    """A worker that fails early (before it gets the APE) or dies while drawing, or a latency fork
    that dies: every plot is still drawn, the same as without the worker; only the worker's failure
    is a warning (the worker draws the latency plot itself when its fork dies)."""
    needs.cores(2)  # the worker starts only with two
    monkeypatch.setenv("FIELDTEST_PLOT_WORKER", "0")
    reference = analyze_trial(faulty, tmp_path / "ref")
    monkeypatch.setenv("FIELDTEST_PLOT_WORKER", "1")
    parent = os.getpid()
    marker = tmp_path / "latency-fork-died"
    if failing in ("raises", "dies"):
        drift_figure = plots.drift_figure  # drawn by the worker, not by its latency fork

        def broken(data):
            if os.getpid() != parent:
                if failing == "dies":
                    os._exit(3)
                raise RuntimeError("broken in the worker")
            return drift_figure(data)

        monkeypatch.setattr(plots, "drift_figure", broken)
    else:
        write_latency_plot = plots.write_latency_plot

        def dies_once(out_dir, data):  # the latency fork calls it first; the worker then draws itself
            if os.getpid() != parent and not marker.exists():
                marker.touch()
                os._exit(3)
            return write_latency_plot(out_dir, data)

        monkeypatch.setattr(plots, "write_latency_plot", dies_once)
    m = analyze_trial(faulty, tmp_path / "out")
    assert m.plots == reference.plots
    warned = [w for w in m.warnings if "plot worker" in w]
    if failing == "latency fork dies":
        assert marker.exists() and not warned
    else:
        assert len(warned) == 1
        assert ("failed" if failing == "raises" else "ended without an answer") in warned[0]
    for name in m.plots:
        assert _pixels(tmp_path / "out" / name) == _pixels(tmp_path / "ref" / name)


def test_trajectory_legend_drawn_on_top_as_in_a_full_draw(faulty, tmp_path, monkeypatch):
    """write_plots draws the trajectory before the APE is known and its legend on top afterwards:
    the same pixels as drawing the finished figure in one go."""
    from fieldtest.analysis import pipeline as analyze

    captured, of = [], PlotData.of
    monkeypatch.setattr(analyze.PlotData, "of", lambda *a: captured.append(of(*a)) or captured[-1])
    m = analyze_trial(faulty, tmp_path / "a", plots=False)
    data = captured[0]
    data.metrics["ape"] = as_json(m.ape)
    plots.write_plots(tmp_path, data)
    fig = plots.trajectory_figure(data)
    ax = fig.axes[0]
    ax.plot([], [], " ", label=f"APE vs ideal (evo, origin aligned): RMSE {plots._mm(m.ape.rmse_m)}")
    ax.legend(loc="center", fontsize=8, framealpha=0.85)
    full = np.asarray(plots._draw(fig).buffer_rgba())[:, :, :3]
    with Image.open(tmp_path / plots.TRAJECTORY_PNG) as img:
        assert np.array_equal(np.asarray(img), full)


@pytest.mark.parametrize("alpha", [255, 128])
def test_write_png_round_trip(tmp_path, alpha):
    rng = np.random.default_rng(1)
    rgba = rng.integers(0, 256, (37, 53, 4), dtype=np.uint8)
    rgba[:, :, 3] = 255
    rgba[5, 7, 3] = alpha
    plots.write_png(tmp_path / "x.png", rgba, 110)
    with Image.open(tmp_path / "x.png") as img:
        assert img.mode == ("RGB" if alpha == 255 else "RGBA")
        assert img.info["dpi"] == pytest.approx((110, 110), abs=0.01)
        back = np.asarray(img)
    assert np.array_equal(back, rgba[:, :, : back.shape[2]])


def test_worker_import_keeps_matplotlib_working():
    """The worker imports matplotlib without the generated ``set()`` docs, then puts the generator back."""
    code = """
import matplotlib.artist as artist
kwdoc = artist.kwdoc
from fieldtest.analysis.rendering.plotprocess import _import_plots
_import_plots()
from matplotlib.lines import Line2D
assert artist.kwdoc is kwdoc and artist.kwdoc(Line2D)
assert "Supported properties" not in (Line2D.set.__doc__ or "")
line = Line2D([0, 1], [0, 1])
line.set(lw=3, color="r")
assert line.get_linewidth() == 3
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
