"""One page per campaign: compare writes a self-contained HTML page, its figures as SVG and PDF and its
tables as CSV and LaTeX; a real browser (headless Chromium) renders it offline with every figure."""

import csv
import re
import shutil
import subprocess

import numpy as np
import pytest

from fieldtest.analysis import compare_trials
from fieldtest.analysis.rendering.campaignpage import FIGURES, latex_escape
from fieldtest.plan import SquarePlan
from fieldtest.testkit import needs
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
CONFIGS = {  # (middleware, network) -> (last-lap shift per repetition, latency, jitter)
    ("dds", "wifi"): ((0.010, 0.014, 0.030), 0.003, 0.004),
    ("zenoh-peer", "wifi"): ((0.004, 0.006, 0.005), 0.009, 0.05),
}
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("campaign")
    for (middleware, network), (shifts, latency, jitter) in CONFIGS.items():
        for rep, shift in enumerate(shifts):
            spec = SynthSpec(
                name=f"{middleware}-r{rep}",
                plan=PLAN,
                middleware=middleware,
                network=network,
                repetition=rep,
                last_lap_shift_m=(shift, 0.0),
                latency_s=latency,
                latency_jitter_s=jitter,
                lost_seqs=(30 + rep,),
                seed=rep,
            )
            synthesize(root / "runs" / spec.name, spec)
    out = root / "page"
    result = compare_trials([root / "runs"], out)
    return root, out, result


def test_page_figures_and_tables_are_written(campaign):
    _, out, result = campaign
    page = (out / "campaign.html").read_text()
    for name, _, _ in FIGURES:
        svg = (out / "figures" / f"{name}.svg").read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg
        assert (out / "figures" / f"{name}.pdf").read_bytes().startswith(b"%PDF")
        assert f'<figure id="{name}"><img src="data:image/svg+xml;base64,' in page
    # self-contained: no external resource is fetched (links to the files beside it are not loads)
    assert not re.search(r'<(img|script|link|iframe)[^>]+(src|href)="(?!data:)', page)
    assert "http://" not in page and "https://" not in page
    with (out / "tables" / "trials.csv").open() as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 6 and trials[0]["trial"] == "dds-r0"
    tex = (out / "tables" / "configurations.tex").read_text()
    assert r"\toprule" in tex and r"dds & none & wifi & 3 &" in tex and r"late (\%)" in tex
    assert str(out / "campaign.html") in result["files"]


def test_each_trial_links_its_report(campaign):
    root, out, _ = campaign
    page = (out / "campaign.html").read_text()
    links = re.findall(r'<a href="([^"]+report\.md)">([^<]+)</a>', page)
    assert sorted(name for _, name in links) == sorted(p.name for p in (root / "runs").iterdir())
    for href, name in links:
        assert (out / href).resolve() == (root / "runs" / name / "analysis" / "report.md").resolve()


def test_each_trial_leaves_its_path_for_the_overlay(campaign):
    """trajectory.csv: the ground truth in the start frame from the motion start, every 50 ms."""
    from fieldtest.analysis.rendering.trajectoryfile import read_trajectory

    root, _, _ = campaign
    for trial in (root / "runs").iterdir():
        rows = read_trajectory(trial / "analysis")
        period = 1 / 120.0  # the first pose after the start is within one mocap period of it
        assert rows[0, 1:] == pytest.approx([0.0, 0.0], abs=PLAN.linear_speed_mps * period + 1e-4)
        assert 0 <= rows[0, 0] <= period + 1e-6
        bins = np.floor(rows[:, 0] / 0.05)  # the first pose in each 50 ms, none skipped
        assert np.all(np.diff(bins) == 1), np.diff(bins).max()
        first_lap = rows[rows[:, 0] < PLAN.lap_s]  # (the last lap is shifted)
        assert first_lap[:, 1].max() == pytest.approx(PLAN.side_m, abs=2e-3)  # the first corner
        assert rows[-1, 0] == pytest.approx(PLAN.motion_s, abs=0.05)


def test_latex_escape():
    assert latex_escape("rel_side 5% & $x#{y}") == r"rel\_side 5\% \& \$x\#\{y\}"


_CHECK = """<script>
window.addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const broken = imgs.filter((i) => !(i.complete && i.naturalWidth > 0)).length;
  const marker = document.createElement("div");
  marker.id = "image-check";
  marker.textContent = `images=${imgs.length} broken=${broken}`;
  document.body.appendChild(marker);
});
</script>"""


def _browser(tmp_path, *args) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        needs.tools("chromium")
    argv = [exe, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_a_browser_renders_the_page_with_every_figure(campaign, tmp_path):
    _, out, _ = campaign
    # the same page with a script that counts the images that loaded (the page itself has none)
    checked = out / "campaign-check.html"
    checked.write_text((out / "campaign.html").read_text().replace("</body>", _CHECK + "</body>"))
    proc = _browser(tmp_path, "--virtual-time-budget=10000", "--dump-dom", checked.as_uri())
    found = re.search(r'<div id="image-check">images=(\d+) broken=(\d+)</div>', proc.stdout)
    assert found, proc.stderr[-2000:]
    assert (int(found[1]), int(found[2])) == (len(FIGURES), 0)

    shot = tmp_path / "page.png"
    proc = _browser(
        tmp_path, f"--screenshot={shot}", "--window-size=1280,2400", (out / "campaign.html").as_uri()
    )
    assert shot.is_file(), proc.stderr[-2000:]
    shutil.copy(shot, out / "screenshot.png")  # kept beside the page for a look
    from matplotlib.image import imread

    pixels = imread(shot)[:, :, :3]
    # not blank: many distinct colours (figures, text), and a good share of the page not white
    colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert colours > 50, colours
    assert np.mean(pixels.min(axis=2) < 0.9) > 0.05


def test_no_page_leaves_it_out(campaign, tmp_path):
    from fieldtest.analysis.cli import compare_main

    root, _, _ = campaign
    assert compare_main([str(root / "runs"), "--out", str(tmp_path / "out"), "--no-page"]) == 0
    assert (tmp_path / "out" / "compare.md").is_file()
    assert not (tmp_path / "out" / "campaign.html").exists() and not (tmp_path / "out" / "figures").exists()
