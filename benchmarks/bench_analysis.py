"""Benchmark the analysis: one 96 s trial at 120 Hz and 360 Hz ground truth, and comparing 100 trials.

    .venv/bin/python benchmarks/bench_analysis.py [--keep DIR] [--busy-core]
    .venv/bin/python benchmarks/bench_analysis.py --also-busy-core --reference reference/bench-analysis.json

Prints times only (no pass/fail); each command's time is the best of three runs, with the CPU time
(user + system, the process and the children it waited for, the plot worker) of that run. Beside
each single-trial figure it prints the times of one ``evo_ape`` run on the same poses (the TUM files
the analysis exports), the yardstick the whole analysis should beat. Targets: the whole
single-trial analysis (a fresh ``fieldtest analyze`` process, plots included) faster than that one
evo_ape run; 100 trials compared in under 20 s. ``--busy-core`` keeps one core busy with a spinning
process during the single-trial runs (the condition where the analysis cannot hide its plots on
the second core); ``--also-busy-core`` measures both. ``--reference`` writes the summary that
docs/analysis.md, "Speed", is rendered from (``fieldtest/record/reference.py``), each row with the
machine's load, busy cores and CPU steal over its own runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_twin import Load, load_conditions, measured_load

from fieldtest.analysis import analyze_trial, compare_trials, read_metrics
from fieldtest.analysis.metrics.schema import METRICS_FILE
from fieldtest.catalog import TWIN_MIDDLEWARES as MIDDLEWARES
from fieldtest.record.reference import (
    AnalysisSpeedRow,
    AnalysisSpeedSummary,
    run_summary,
    write_reference,
)
from fieldtest.testkit.docblocks import analysis_speed_lines
from fieldtest.testkit.synth import SynthSpec, synthesize

REPEAT = 3


def _timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def _run(cmd: list[str], env: dict | None = None, repeat: int = REPEAT) -> tuple[float, float]:
    """(wall, CPU) s of the run with the best wall time of ``repeat`` runs of a command (the machine
    is shared: the best is the cost)."""
    runs = []
    for _ in range(repeat):
        before = _children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        runs.append((time.perf_counter() - start, _children_cpu() - before))
        if proc.returncode != 0:
            raise SystemExit(f"{cmd[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return min(runs)


def _children_cpu() -> float:
    """User + system s of the children this process has waited for (and of theirs: the plot worker)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def realistic_spec(rate_hz: float, **overrides) -> SynthSpec:
    """The seed study's square (4 laps, 96 s) with noise, gaps, jitter, a clock offset and some loss."""
    fields = {
        "mocap_rate_hz": rate_hz,
        "mocap_noise_m": 0.0003,
        "last_lap_shift_m": (0.03, -0.02),
        "last_lap_rotation_deg": 1.5,
        "lost_frames": [(20.0, 0.3), (50.0, 0.02)],
        "invalid_frames": [(70.0, 0.2)],
        "clock_offset_s": 0.8,
        "clock_drift_ppm": 15.0,
        "latency_s": 0.003,
        "latency_jitter_s": 0.004,
        "lost_seqs": tuple(range(400, 420)),
    }
    fields.update(overrides)
    return SynthSpec(**fields)


class Measured:
    """The rows of one benchmark run, each with the machine's conditions over its own runs."""

    def __init__(self) -> None:
        self.rows: list[AnalysisSpeedRow] = []

    def add(self, measure: str, wall_cpu: tuple[float, float | None], load: Load, **where) -> None:
        self.rows.append(
            AnalysisSpeedRow(
                measure=measure,
                wall_s=wall_cpu[0],
                cpu_s=wall_cpu[1],
                conditions=load_conditions([load]),
                **where,
            )
        )


def bench_single(root: Path, rate_hz: float, measured: Measured, busy_core: bool) -> None:
    trial = root / f"trial-{int(rate_hz)}hz{'-busy' if busy_core else ''}"
    t_synth, _ = _timed(synthesize, trial, realistic_spec(rate_hz))
    exe = Path(sys.executable).parent
    cli = [sys.executable, "-m", "fieldtest.cli", "analyze", str(trial)]
    where = {"rate_hz": rate_hz, "busy_core": busy_core}
    _run(cli, repeat=1)  # caches warm (with PYTHONDONTWRITEBYTECODE set, every run compiles the kit)
    with measured_load() as load:
        process = _run(cli)  # a fresh process: imports, bags, metrics, evo APE, plots, report
    measured.add("analyze", process, load, **where)
    with measured_load() as load:
        no_plots = _run(cli + ["--no-plots"])
    measured.add("analyze-no-plots", no_plots, load, **where)
    analyze_trial(trial)  # imports and caches warm (a second run: the plot worker's too)
    analyze_trial(trial)
    with measured_load() as load:
        t_warm, _ = _timed(analyze_trial, trial)
    measured.add("analyze-warm", (t_warm, None), load, **where)
    analyze_trial(trial, root / "tum", plots=False, report=False, export_tum=True)
    metrics = read_metrics(root / "tum" / METRICS_FILE)
    ref, est = (root / "tum" / name for name in metrics.ape.tum_files)
    home = root / "evo-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), MPLBACKEND="Agg")
    evo_cmd = [str(exe / "evo_ape"), "tum", str(ref), str(est), "--align_origin", "--no_warnings"]
    _run(evo_cmd, env, repeat=1)  # the first run writes evo's settings file
    with measured_load() as load:
        evo = _run(evo_cmd, env)
    measured.add("evo-ape", evo, load, **where)
    poses = metrics.ape.poses
    print(
        f"\n96 s trial, {rate_hz:g} Hz ground truth{', a core busy' if busy_core else ''} ({poses} poses in the APE window; synthesized in {t_synth:.2f} s)"
    )
    print(f"  fieldtest analyze (new process, plots + report) {_times(process)}")
    print(f"  fieldtest analyze --no-plots (new process)      {_times(no_plots)}")
    print(f"  analyze_trial in a warm process (plots + report) {t_warm:5.2f} s")
    print(f"  one evo_ape run on the same poses               {_times(evo)}")
    verdict = "faster" if process[0] < evo[0] else "SLOWER"
    print(f"  -> the whole analysis is {verdict} than one evo_ape run ({process[0] / evo[0]:.2f}x its time)")


def _times(wall_cpu: tuple[float, float]) -> str:
    return f"{wall_cpu[0]:6.2f} s (CPU {wall_cpu[1]:.2f} s)"


def make_campaign(root: Path, n: int) -> Path:
    """n trials: five middlewares x security on/off, repetitions; copies of ten synthesized trials."""
    seeds = root / "seeds"
    runs = root / "campaign"
    configs = [(mw, sec) for mw in MIDDLEWARES for sec in ("none", "sros2")]
    for i, (mw, sec) in enumerate(configs):
        synthesize(
            seeds / f"{mw}-{sec}",
            realistic_spec(
                120.0, middleware=mw, security=sec, seed=i, last_lap_shift_m=(0.01 * (i + 1), 0.0)
            ),
        )
    for k in range(n):
        mw, sec = configs[k % len(configs)]
        rep = k // len(configs)
        dst = runs / f"{mw}-{sec}-r{rep}"
        shutil.copytree(seeds / f"{mw}-{sec}", dst)
        raw = yaml.safe_load((dst / "trial.yaml").read_text())
        raw["request"]["repetition"] = rep
        raw["request"]["name"] = dst.name
        raw["trial_id"] = f"bench-{dst.name}"
        (dst / "trial.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return runs


def bench_compare(root: Path, n: int, measured: Measured) -> None:
    t_make, runs = _timed(make_campaign, root, n)
    with measured_load() as load:
        t_scratch, _ = _timed(compare_trials, [runs], root / "compare-scratch")
    measured.add("compare-scratch", (t_scratch, None), load, trials=n)
    with measured_load() as load:
        t_cached, result = _timed(compare_trials, [runs], root / "compare")
    measured.add("compare-cached", (t_cached, None), load, trials=n)
    cli = [sys.executable, "-m", "fieldtest.cli", "compare", str(runs), "--out", str(root / "compare-cli")]
    with measured_load() as load:
        t_process, cpu_process = _run(cli + ["--no-page"])
    measured.add("compare-process", (t_process, cpu_process), load, trials=n)
    print(
        f"\ncompare {len(result['trials'])} trials ({len(result['rows'])} configurations; made in {t_make:.1f} s)"
    )
    print(f"  no metrics.json yet (analyzes every trial, no plots) {t_scratch:6.2f} s")
    print(f"  every trial already analyzed (reads metrics.json)    {t_cached:6.2f} s")
    print(f"  fieldtest compare (new process, metrics.json read)   {t_process:6.2f} s")
    print(
        f"  -> target 100 trials under 20 s: {'met' if t_process < 20 else 'MISSED'} for a campaign whose trials were analyzed after each run, "
        f"{'met' if t_scratch < 20 else 'missed'} from scratch"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keep", help="work in this directory and keep it (default: a temporary one)")
    parser.add_argument("--trials", type=int, default=100, help="trials to compare (default 100)")
    parser.add_argument(
        "--busy-core", action="store_true", help="keep one core busy during the single-trial runs"
    )
    parser.add_argument(
        "--also-busy-core", action="store_true", help="single-trial runs with the core free, then busy"
    )
    parser.add_argument(
        "--reference", type=Path, help="write the summary here (reference/bench-analysis.json)"
    )
    args = parser.parse_args(argv)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    root.mkdir(parents=True, exist_ok=True)
    measured = Measured()
    busy_settings = [False, True] if args.also_busy_core else [args.busy_core]
    try:
        for busy in busy_settings:
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                for rate in (120.0, 360.0):
                    bench_single(root, rate, measured, busy)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
        bench_compare(root, args.trials, measured)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("\n" + "\n".join(analysis_speed_lines(measured.rows)))
    if args.reference:
        summary = run_summary(
            AnalysisSpeedSummary,
            args.reference,
            "nice -n 10 .venv/bin/python benchmarks/bench_analysis.py",
            argv,
            {
                "best_of": REPEAT,
                "trials_compared": args.trials,
                "trial_s": 96,
                "rates_hz": [120.0, 360.0],
                "busy_core": [str(b).lower() for b in busy_settings],
            },
            measured.rows,
        )
        write_reference(args.reference, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
