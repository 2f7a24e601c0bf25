#!/usr/bin/env python3
"""A newcomer's first verdict: the README's first command, `make demo`, from nothing.

    .venv/bin/python benchmarks/bench_newcomer.py                      # one run, printed
    .venv/bin/python benchmarks/bench_newcomer.py --reference reference/bench-newcomer.json

Each run clones this repository's HEAD into a fresh directory and runs `make demo` there as a new
user would: PATH=/usr/bin:/bin, an empty HOME and an empty kit cache (``FIELDTEST_CACHE``), so no
venv, C helper, wheel or Zenoh bridge built before is found. The apt packages stay what the machine
has (removing them would change the machine for everyone on it). Timed from the start of `make demo`:
the install's end (its "ready" line), the first trial's start, and the verdict; the verdict itself,
how many trials were valid, and the machine's load, busy cores and steal over the whole run.

Not a pass/fail target: the figures move with the machine's load; read them beside the conditions.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_twin import load_conditions, measured_load

from fieldtest.record.reference import NewcomerRow, NewcomerSummary, run_summary, write_reference
from fieldtest.testkit.docblocks import newcomer_table

ROOT = Path(__file__).resolve().parents[1]
INSTALL_READY = "[install] ready for the twin trial"
FIRST_TRIAL = re.compile(r"running \d+ trial\(s\) at once")
VERDICT = re.compile(r"^verdict: (VALID|NOT VALID|validity unknown)", re.M)
TRIAL_LINE = re.compile(r"^\s*(completed|error|interrupted|\S+)\s+(\S+)/analysis/report\.md", re.M)


def fresh_env(work: Path) -> dict[str, str]:
    home = work / "home"
    home.mkdir()
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "FIELDTEST_CACHE": str(work / "cache"),
    }


def timed_lines(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, list[tuple[float, str]]]:
    """Run ``argv``; every output line with the seconds since the start at which it came."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = [(time.monotonic() - start, line.rstrip("\n")) for line in proc.stdout]
    return proc.wait(), lines


def first_time(lines: list[tuple[float, str]], found) -> float | None:
    return next((t for t, line in lines if found(line)), None)


def run_once(repetition: int) -> NewcomerRow:
    with tempfile.TemporaryDirectory(prefix="bench-newcomer-") as tmp:
        work = Path(tmp)
        clone = work / "fieldtest"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        with measured_load() as load:
            code, lines = timed_lines(["make", "demo"], clone, fresh_env(work))
    text = "\n".join(line for _, line in lines)
    verdict = VERDICT.search(text)
    trials = TRIAL_LINE.findall(text)
    invalid = re.search(r"^verdict: NOT VALID for (.+?)(?: \(\d+ re-run|:$)", text, re.M)
    reruns = re.search(r"\((\d+) re-run\(s\) of invalid trials\)", text)
    return NewcomerRow(
        repetition=repetition, exit_code=code,
        install_s=first_time(lines, lambda line: line.startswith(INSTALL_READY)),
        first_trial_s=first_time(lines, lambda line: bool(FIRST_TRIAL.search(line))),
        verdict_s=first_time(lines, lambda line: bool(VERDICT.match(line))),
        total_s=lines[-1][0] if lines else 0.0,
        verdict=verdict[1] if verdict else "none",
        trials=len(trials), invalid=len(invalid[1].split(", ")) if invalid else 0,
        reruns=int(reruns[1]) if reruns else 0,
        last_lines=[line for _, line in lines[-3:]] if code else [],
        conditions=load_conditions([load]),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs, one after another (default 1)")
    parser.add_argument("--reference", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)
    rows = []
    for repetition in range(args.repeat):
        rows.append(run_once(repetition))
        print(f"run {repetition}: {rows[-1].model_dump()}", file=sys.stderr, flush=True)
    print("\n".join(newcomer_table(rows)))
    if args.reference:
        summary = run_summary(
            NewcomerSummary,
            args.reference,
            ".venv/bin/python benchmarks/bench_newcomer.py",
            argv,
            {"repeat": args.repeat},
            rows,
        )
        write_reference(args.reference, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
