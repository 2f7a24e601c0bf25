"""``fieldtest analyze`` and ``fieldtest compare``: argument parsing, one-line errors, exit codes.

Exit codes: 0 done (a partial result is flagged, not an error), 1 partial with --strict,
2 bad input (one line naming the file and the problem, never a traceback).

This module imports only the standard library and plain constants: ``fieldtest analyze`` forks
its plot worker before it imports the analysis (numpy, pydantic, evo with scipy), so matplotlib
loads on the other core meanwhile.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fieldtest.analysis.loading import DEFAULT_MAX_GAP_S
from fieldtest.analysis.rendering.plotprocess import PlotWorker
from fieldtest.errors import FieldtestError
from fieldtest.record import MOCAP_POSE_TOPIC

if TYPE_CHECKING:
    from fieldtest.analysis.metrics.schema import Metrics

EXIT_OK, EXIT_PARTIAL, EXIT_BAD_INPUT = 0, 1, 2


def _ground_truth_options(parser: argparse.ArgumentParser, with_bag: bool = True) -> None:
    g = parser.add_argument_group("ground truth")
    g.add_argument(
        "--pose-topic",
        default=MOCAP_POSE_TOPIC,
        help="PoseStamped topic of the ground truth, looked up in the mocap, robot and host bags "
        f"(default {MOCAP_POSE_TOPIC}; e.g. /vrpn_mocap/<name>/pose from a lab driver)",
    )
    if with_bag:
        g.add_argument("--pose-bag", help="read the pose topic from this rosbag2 folder instead (host clock)")
    g.add_argument(
        "--up-axis", choices=("z", "y"), default="z", help="up axis of the poses (y = Motive's default)"
    )
    g.add_argument(
        "--pose-time",
        choices=("header", "log"),
        default="header",
        help="time of a pose: its header stamp (default) or the bag's log time",
    )
    g.add_argument(
        "--mocap-time",
        choices=("capture", "receipt"),
        default="capture",
        help="time of a mocap pose: its frame's capture stamp mapped to the host clock (default) "
        "or when the frame arrived",
    )
    g.add_argument(
        "--max-gap",
        type=float,
        default=DEFAULT_MAX_GAP_S,
        metavar="S",
        help=f"longest mocap gap bridged by interpolation; longer gaps are excluded (default {DEFAULT_MAX_GAP_S})",
    )


def _gt_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "pose_topic": args.pose_topic,
        "pose_bag": getattr(args, "pose_bag", None),
        "up_axis": args.up_axis,
        "pose_time": args.pose_time,
        "mocap_time": args.mocap_time,
        "max_gap_s": args.max_gap,
    }


def _fail(prog: str, exc: BaseException, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    known = isinstance(exc, ValueError | OSError)
    print(
        f"{prog}: {message if known else f'internal error ({type(exc).__name__}: {message})'}",
        file=sys.stderr,
    )
    return EXIT_BAD_INPUT


@contextlib.contextmanager
def _one_analysis() -> Iterator[None]:
    """Set up a process whose whole job is one analysis (``fieldtest analyze``).

    - One OpenBLAS thread, unless set otherwise: the analysis multiplies 4x4 matrices, and starting
      the thread pools of numpy's and scipy's OpenBLAS costs a fresh process about 0.08 s. Only
      before numpy loads (the library reads it then), so an in-process caller is left alone.
    - No cyclic garbage collection meanwhile: the analysis makes few reference cycles, and the
      collector's passes over the objects of numpy, scipy, evo and pydantic as they are imported
      cost about a tenth of a fresh process's time.
    - Objects frozen at exit, so the interpreter does not walk them all once more on the way out.
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    enabled = gc.isenabled()
    gc.disable()
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _mm(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1000:.1f} mm"


def summary_line(m: Metrics) -> str:
    d, lat = m.drift, m.latency
    parts = [f"{m.trial.name}:"]
    if d.available:
        parts.append(
            f"drift lap {d.last_lap} vs 1 mean {_mm(d.mean_m)} (end {_mm(d.at_lap_end_m)}), "
            f"heading {d.heading_change_deg:.2f} deg, closing {_mm(d.closing.distance_m if d.closing else None)};"
        )
    else:
        parts.append(f"drift n/a ({d.reason or None});")
    parts.append(f"APE RMSE {_mm(m.ape.rmse_m)};")
    one_way = lat.one_way_ms
    if one_way and one_way.count:
        parts.append(
            f"latency median {one_way.median:.2f} ms (p99 {one_way.p99:.2f} ms), "
            f"lost {lat.lost}/{lat.commands_sent}"
        )
    else:
        parts.append("latency n/a")
    return " ".join(parts)


def analyze_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest analyze",
        description="Analyze one trial directory: drift between laps, APE against the ideal square (evo), "
        "link latency and loss. Writes <trial>/analysis/metrics.json, report.md and PNG plots.",
    )
    parser.add_argument("trial_dir", help="a trial directory (with trial.yaml)")
    parser.add_argument("--out", help="output directory (default <trial>/analysis)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--export-tum", action="store_true", help="also write the APE trajectories as TUM files for evo_ape"
    )
    parser.add_argument("--json", action="store_true", help="print metrics.json to stdout")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the result is partial")
    parser.add_argument(
        "--base-calibration",
        metavar="FILE",
        help="split the rest drift with the robot's UMBmark calibration (compare's base_calibration.json)",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    _ground_truth_options(parser)
    args = parser.parse_args(argv)
    with _one_analysis():
        worker = None if args.no_plots else PlotWorker.start()
        try:
            from fieldtest.analysis.loading.trialrobot import load_calibration
            from fieldtest.analysis.pipeline import analyze_trial

            calibration = (
                load_calibration(args.base_calibration, args.trial_dir) if args.base_calibration else None
            )
            metrics = analyze_trial(
                args.trial_dir,
                args.out,
                plots=not args.no_plots,
                export_tum=args.export_tum,
                plot_worker=worker,
                base_calibration=calibration,
                **_gt_kwargs(args),
            )
        except FieldtestError:
            raise  # one line from the command line (fieldtest.cli)
        except Exception as exc:  # one line, never a traceback (unless --debug)
            return _fail("fieldtest analyze", exc, args.debug)
        finally:
            if worker is not None:
                worker.close()
    if args.json:
        import json

        from fieldtest.analysis.metrics.schema import as_json

        print(json.dumps(as_json(metrics), indent=1))
        return EXIT_PARTIAL if (args.strict and metrics.partial) else EXIT_OK
    from fieldtest.analysis.metrics.schema import METRICS_FILE, read_metrics

    out = args.out or f"{args.trial_dir.rstrip('/')}/analysis"
    written = read_metrics(f"{out}/{METRICS_FILE}")
    print(summary_line(written))
    for reason in written.partial_reasons:
        print(f"partial: {reason}")
    for warning in written.warnings:
        print(f"warning: {warning}")
    print(f"wrote {out}/: {', '.join([METRICS_FILE, 'report.md', *written.plots])}")
    return EXIT_PARTIAL if (args.strict and written.partial) else EXIT_OK


def _differences_mm(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) / 1000 for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated millimetres, e.g. 1,2,5") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: every difference must be positive")
    return values


def compare_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fieldtest compare",
        description="Compare trials: one row per middleware x security x network with the median and spread "
        "over repetitions (Markdown, CSV, JSON), a bar plot of drift per configuration, and campaign.html: "
        "the campaign on one offline page, its figures as SVG and PDF and its tables as CSV and LaTeX.",
    )
    parser.add_argument("dirs", nargs="+", help="trial directories, or directories holding trial directories")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument(
        "--reanalyze", action="store_true", help="analyze every trial again instead of reading metrics.json"
    )
    parser.add_argument(
        "--jobs", type=int, help="processes analyzing trials that need it (default: one per core)"
    )
    parser.add_argument(
        "--no-page", action="store_true", help="skip campaign.html and its figures and tables (faster)"
    )
    parser.add_argument(
        "--resolve",
        type=_differences_mm,
        default=None,
        metavar="MM,...",
        help="differences of lap drift (mm) the power table gives repetitions for (default 0.5,1,2,5,10,20)",
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    _ground_truth_options(parser, with_bag=False)
    args = parser.parse_args(argv)
    try:
        from fieldtest.analysis.pipeline import compare_trials

        result = compare_trials(
            args.dirs,
            args.out,
            reanalyze=args.reanalyze,
            jobs=args.jobs,
            page=not args.no_page,
            **({"resolve_m": args.resolve} if args.resolve else {}),
            **_gt_kwargs(args),
        )
    except FieldtestError:
        raise  # one line from the command line (fieldtest.cli)
    except Exception as exc:
        return _fail("fieldtest compare", exc, args.debug)
    for skipped in result["skipped"]:
        print(f"skipped: {skipped}", file=sys.stderr)
    print(f"{len(result['trials'])} trials in {len(result['rows'])} configurations")
    for row in result["rows"]:
        drift = row["metrics"]["drift_mean"]
        lat = row["metrics"]["latency_median"]
        drift_txt = "n/a" if drift["median"] is None else f"{drift['median']:.1f} mm"
        lat_txt = "n/a" if lat["median"] is None else f"{lat['median']:.2f} ms"
        print(
            f"  {row['middleware']:<18} {row['security']:<12} {row['network']:<10} n={row['trials']:<3} "
            f"drift {drift_txt:>9}  latency {lat_txt:>9}"
        )
    print("wrote " + ", ".join(result["files"]))
    return EXIT_OK
