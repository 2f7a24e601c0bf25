"""``fieldtest predict TRACE [--plan plan.yaml] [--bound-m 0.05]``: the drift, closing error and
watchdog stops a latency and loss trace would give the square, and the plan's envelope.

Writes a terminal table, ``prediction.json`` and ``prediction.png`` (drift against outage and p99
latency with the bound) into ``--out`` (default: beside the trace)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fieldtest.analysis.prediction.linktrace import TraceError, read_trace
from fieldtest.analysis.prediction.predict import envelope, predict
from fieldtest.plan import PlanError, SquarePlan, plan_from_mapping

DEFAULT_BOUND_M = 0.05


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fieldtest predict",
        description="Predict lap drift, closing error and watchdog stops from a latency and loss trace "
        "(trial directory, robot bag, latency CSV, performance_test CSV or ping output) with the Create 3 model.",
    )
    p.add_argument("trace", type=Path, help="trace file, robot bag or trial directory")
    p.add_argument("--plan", type=Path, help="plan YAML (SquarePlan fields; default: the seed study's plan)")
    p.add_argument("--bound-m", type=float, default=DEFAULT_BOUND_M, help="lap drift bound of the envelope")
    p.add_argument("--offset-s", type=float, default=0.0, help="trace time at the plan's first tick")
    p.add_argument("--ping-interval-s", type=float, help="ping's -i (default 1 s, or its -D stamps)")
    p.add_argument("--safety-override", default="full", choices=("none", "backup_only", "full"))
    p.add_argument("--no-envelope", action="store_true", help="skip the envelope search")
    p.add_argument("--out", type=Path, help="folder for prediction.json and prediction.png")
    p.add_argument("--no-plots", action="store_true", help="no prediction.png")
    # the earlier spelling, still accepted so existing scripts run
    p.add_argument("--no-plot", dest="no_plots", action="store_true", help=argparse.SUPPRESS)
    return p


def load_plan(path: Path | None, trace_path: Path) -> SquarePlan:
    """The plan YAML if given; a trial directory's own plan; else the default plan."""
    import yaml

    if path is not None:
        try:
            values = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise PlanError(f"{path}: cannot read plan ({str(exc).splitlines()[0]})") from None
        if not isinstance(values, dict):
            raise PlanError(f"{path}: a plan is a mapping of SquarePlan fields")
        return plan_from_mapping(values.get("plan", values), str(path))
    if (trace_path / "trial.yaml").is_file():
        from fieldtest.record import read_trial

        return read_trial(trace_path).request.plan
    return SquarePlan()


def predict_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        trace = read_trace(args.trace, args.ping_interval_s)
        plan = load_plan(args.plan, args.trace)
    except (TraceError, PlanError) as exc:
        print(f"fieldtest predict: {exc}", file=sys.stderr)
        return 2
    result = predict(plan, trace, args.offset_s, args.safety_override)
    result["plan"] = plan.model_dump()
    if not args.no_envelope:
        base = (result["trace"]["latency_median_ms"] or 0.0) / 1e3
        result["envelope"] = envelope(plan, args.bound_m, base, args.safety_override)
        result["envelope"]["trace_inside"] = inside_envelope(result["trace"], result["envelope"])
    print(table(result))
    out = args.out or (args.trace if args.trace.is_dir() else args.trace.parent)
    out.mkdir(parents=True, exist_ok=True)
    (out / "prediction.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / 'prediction.json'}")
    if not args.no_plots and "envelope" in result:
        plot(result, out / "prediction.png")
        print(f"wrote {out / 'prediction.png'}")
    return 0


def inside_envelope(trace: dict, env: dict) -> dict:
    """Whether the trace's own longest outage and p99 latency are within the envelope."""
    outage, p99 = trace["longest_loss_s"], (trace["latency_p99_ms"] or 0.0) / 1e3
    return {
        "outage_s": outage,
        "outage_inside": env["max_outage_s"] is not None and outage <= env["max_outage_s"],
        "p99_latency_s": p99,
        "p99_inside": env["max_p99_latency_s"] is not None and p99 <= env["max_p99_latency_s"],
    }


def _mm(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f} mm"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.0f} ms"


def table(result: dict) -> str:
    tr, p, ideal = result["trace"], result["predicted"], result["ideal_link"]
    rows = [
        ("trace", f"{tr['source']} ({tr['kind']}): {tr['messages']} messages, {tr['lost']} lost"),
        (
            "latency",
            f"median {tr['latency_median_ms']:.1f} ms, p99 {tr['latency_p99_ms']:.1f} ms, "
            f"longest silence {tr['longest_outage_s']:.2f} s, longest loss {tr['longest_loss_s']:.2f} s",
        ),
        ("lap drift (mean)", f"{_mm(p.get('drift_mean_m'))} (ideal link {_mm(ideal.get('drift_mean_m'))})"),
        ("lap drift (max)", _mm(p.get("drift_max_m"))),
        ("lap drift at lap end", _mm(p.get("drift_at_lap_end_m"))),
        ("closing error", f"{_mm(p['closing_m'])} (ideal link {_mm(ideal['closing_m'])})"),
        ("closing added by the link", _mm(p["closing_added_m"])),
        ("travel lost", _mm(p["travel_lost_m"])),
        (
            "watchdog stops",
            f"{p['watchdog_stops']}"
            + "".join(f"; lap {s['lap']} {s['segment']}" for s in p["watchdog_stop_at"][:5]),
        ),
    ]
    env = result.get("envelope")
    if env:
        bound = _mm(env["bound_m"])
        rows += [
            (f"largest outage for drift <= {bound}", _ms(env["max_outage_s"])),
            (f"largest p99 latency for drift <= {bound}", _ms(env["max_p99_latency_s"])),
        ]
        inside = env.get("trace_inside")
        if inside:
            verdict = {True: "inside", False: "OUTSIDE"}
            rows.append(
                (
                    "this trace against the envelope",
                    f"outage {_ms(inside['outage_s'])} {verdict[inside['outage_inside']]}, "
                    f"p99 {_ms(inside['p99_latency_s'])} {verdict[inside['p99_inside']]}",
                )
            )
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def plot(result: dict, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    env, tr = result["envelope"], result["trace"]
    fig = Figure(figsize=(9, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    panels = (
        ("outage_curve", "outage_s", "single outage (s)", "max_outage_s", tr["longest_loss_s"]),
        ("p99_curve", "p99_latency_s", "p99 latency (s)", "max_p99_latency_s", tr["latency_p99_ms"] / 1e3),
    )
    for i, (curve, key, label, limit, own) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        xs = [c[key] for c in env[curve]]
        ax.plot(xs, [c["drift_m"] * 1e3 for c in env[curve]], "o-", ms=3, label="worst lap drift")
        ax.axhline(env["bound_m"] * 1e3, color="red", ls="--", label="bound")
        if env[limit] is not None:
            ax.axvline(env[limit], color="gray", ls=":", label=f"envelope {env[limit]:.3f} s")
        ax.axvline(own, color="green", ls="-.", label=f"this trace {own:.3f} s")
        ax.set_xlabel(label)
        ax.set_ylabel("lap drift (mm)")
        ax.legend(fontsize=7)
    fig.suptitle(f"Predicted lap drift, bound {env['bound_m'] * 1e3:.0f} mm", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
