"""The APE figure must be what the evo command line reports on the same poses."""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.plan import SquarePlan
from fieldtest.testkit import needs
from fieldtest.testkit.synth import SynthSpec, synthesize

EVO_APE = Path(sys.executable).parent / "evo_ape"


def test_ape_equals_evo_ape_command_line(tmp_path):
    if not EVO_APE.exists():
        pytest.fail(f"needs evo_ape at {EVO_APE}: {needs.INSTALL_HINT}", pytrace=False)
    spec = SynthSpec(
        plan=SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0),
        last_lap_shift_m=(0.04, 0.025),
        last_lap_rotation_deg=-3.0,
        world_yaw_deg=200.0,
        body_yaw_offset_deg=4.0,
        mocap_noise_m=0.0005,
        height_m=0.3,
    )
    synthesize(tmp_path / "t", spec)
    m = analyze_trial(tmp_path / "t", plots=False, report=False, export_tum=True)
    ape = m.ape
    assert ape.available and ape.rmse_m > 0.005  # a real error, not zero against zero
    ref, est = (tmp_path / "t" / "analysis" / name for name in ape.tum_files)
    env = dict(os.environ, HOME=str(tmp_path / "home"), MPLBACKEND="Agg")
    (tmp_path / "home").mkdir()
    result = tmp_path / "evo.zip"
    proc = subprocess.run(
        [
            str(EVO_APE),
            "tum",
            str(ref),
            str(est),
            "--align_origin",
            "--save_results",
            str(result),
            "--no_warnings",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(result) as z:
        stats = json.loads(z.read("stats.json"))
    for key in ("rmse", "mean", "median", "std", "min", "max"):
        assert getattr(ape, f"{key}_m") == pytest.approx(stats[key], abs=1e-6), key
    assert f"{stats['rmse']:.6f}" in proc.stdout  # and it is what evo_ape prints
