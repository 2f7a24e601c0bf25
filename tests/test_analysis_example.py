"""analysis/lap_drift.py, the API example in the top-level analysis/ folder, on synthetic trials."""

import subprocess
import sys
from pathlib import Path

from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

EXAMPLE = Path(__file__).resolve().parents[1] / "analysis" / "lap_drift.py"
PLAN = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)


def run_example(*args) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_prints_each_laps_drift_against_lap_one(tmp_path):
    shifts_mm = {"shift-7": 7.0, "shift-23": 23.0}
    for name, mm in shifts_mm.items():
        synthesize(tmp_path / name, SynthSpec(name=name, plan=PLAN, last_lap_shift_m=(mm / 1000, 0.0)))
    synthesize(tmp_path / "cut", SynthSpec(name="cut", plan=PLAN, truncate={"mocap": 0.0, "robot": 0.0}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "trial.yaml").write_text("request: [\n")

    lines = run_example(tmp_path)
    by_name = {line.split()[0]: line for line in lines}
    assert set(by_name) == {"shift-7", "shift-23", "cut", "broken"}
    for name, mm in shifts_mm.items():  # a pure shift of the last lap: its drift curve is |shift|
        last_lap = by_name[name].split("L3:")[1].split()[0]
        assert abs(float(last_lap) - mm) < 0.1, by_name[name]
        assert "dds/none/loopback" in by_name[name] and by_name[name].endswith("valid")
    assert "no drift" in by_name["cut"]
    assert "skipped: " in by_name["broken"] and "trial.yaml" in by_name["broken"]
    assert (tmp_path / "shift-7" / "analysis" / "metrics.json").is_file()
    assert run_example(tmp_path / "shift-7", "--reanalyze")[0] == by_name["shift-7"]
