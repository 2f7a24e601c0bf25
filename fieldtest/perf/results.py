"""A sweep's rows as files: ``perf.csv`` (performance_test's column names where they mean the same),
``subscribers.csv`` (one line per receiver), ``cases.csv`` (per case: the mean over its repetitions
and the 95 % interval of that mean), ``perf.json`` (every figure, per subscriber and per process,
and the cases), ``table2.md``/``table2.png`` (Zhang et al.'s Table 2: mean latency per message and
middleware, "-" where the case failed, +- the 95 % interval with repetitions) and
``throughput.png`` (their Fig. 6: throughput per message and middleware)."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import ModuleType

from .case import PerfCase, PerfRow, rate_text
from .stats import MeanInterval, mean_interval

CASE_COLUMNS = tuple(f.name for f in fields(PerfCase))
_LATENCY = ("min", "max", "mean", "variance")
FIGURE_COLUMNS = (
    "T_experiment", "T_loop", "received", "sent", "lost", "relative_loss", "data_received",
    *(f"latency_{k} (ms)" for k in _LATENCY),
    "ru_utime", "ru_stime", "ru_maxrss", "cpu_usage (%)",
    # the kit's own, beyond performance_test's
    "size (B)", "throughput_sent (B/s)", "throughput_received (B/s)", "late_sends",
    "throughput_sent (msg/s)", "throughput_received (msg/s)", "throughput_sent (MB/s)",
    "throughput_received (MB/s)", "writer_timeouts", "writer_backlog_max", "received_late",
    *(f"round_trip_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    *(f"one_way_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    *(f"one_way_back_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    "relay_ru_maxrss", "relay_cpu_usage (%)", "relay_decode_mean (ms)", "relay_echo_mean (ms)",
    # lab rows: the host - robot clock offset the one-way figures rest on (as a trial's analysis
    # names it) and the bound its minimum-delay probe puts on its error
    "clock_offset_source", "clock_offset_s", "min_delay_s", "ntp_error_bound_ms", "clock_probes",
)  # fmt: skip
COLUMNS = (*CASE_COLUMNS, "repetition", "status", "error", "valid", "invalid_reasons", *FIGURE_COLUMNS)
# The figures a case's repetitions are summarised by (mean and 95 % interval, ``cases.csv``)
INTERVAL_FIGURES = (
    "latency_mean (ms)", "round_trip_mean (ms)", "one_way_mean (ms)", "one_way_p99 (ms)",
    "relative_loss", "throughput_received (B/s)", "throughput_received (msg/s)", "cpu_usage (%)",
    "relay_cpu_usage (%)",
)  # fmt: skip
CASES_COLUMNS = (
    *CASE_COLUMNS, "runs", "ok", "invalid",
    *(f"{figure}{part}" for figure in INTERVAL_FIGURES for part in ("", " low95", " high95")),
)  # fmt: skip


def csv_row(row: PerfRow) -> dict:
    case = {k: getattr(row.case, k) for k in CASE_COLUMNS}
    return {
        **case,
        "repetition": row.repetition,
        "status": row.status,
        "error": row.error,
        "valid": row.valid,
        "invalid_reasons": "; ".join(row.invalid_reasons),
        **{k: row.figures.get(k) for k in FIGURE_COLUMNS},
    }


def write_csv(rows: list[PerfRow], path: Path) -> None:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in csv_row(row).items()})


SUBSCRIBER_COLUMNS = (
    "subscriber", "sent", "received", "lost", "echoed", "round_trip_lost",
    *(f"one_way_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    *(f"round_trip_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    "relay_decode_mean (ms)", "relay_echo_mean (ms)",
)  # fmt: skip


def write_subscribers_csv(rows: list[PerfRow], path: Path) -> None:
    """One line per subscriber of every row: fan-out latency and loss per receiver."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=(*CASE_COLUMNS, "repetition", *SUBSCRIBER_COLUMNS))
        writer.writeheader()
        for row in rows:
            case = {**{k: getattr(row.case, k) for k in CASE_COLUMNS}, "repetition": row.repetition}
            for sub in row.subscribers:
                values = {k: sub.get(k) for k in SUBSCRIBER_COLUMNS}
                writer.writerow({**case, **{k: "" if v is None else v for k, v in values.items()}})


@dataclass(frozen=True)
class CaseSummary:
    """One case over its repetitions: its runs, how many were ok and valid (``PerfRow.counted``: an
    invalid row is kept in the files but counts nowhere) and how many invalid, and per figure of
    ``INTERVAL_FIGURES`` the mean over the counted ones with its 95 % interval."""

    case: PerfCase
    runs: int
    ok: int
    invalid: int
    figures: dict[str, MeanInterval]


def case_summaries(rows: list[PerfRow]) -> list[CaseSummary]:
    """Per case, in the order the rows ran (``mean_interval`` for each figure)."""
    by_case: dict[PerfCase, list[PerfRow]] = defaultdict(list)
    for row in rows:
        by_case[row.case].append(row)
    out = []
    for case, runs in by_case.items():
        ok = [r for r in runs if r.counted]
        figures = {f: mean_interval([r.figures.get(f) for r in ok]) for f in INTERVAL_FIGURES}
        invalid = sum(r.valid is False for r in runs)
        out.append(CaseSummary(case, runs=len(runs), ok=len(ok), invalid=invalid, figures=figures))
    return out


def write_cases_csv(summaries: list[CaseSummary], path: Path) -> None:
    """One line per case: the mean of each figure over its ok repetitions and its 95 % interval."""
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CASES_COLUMNS)
        writer.writeheader()
        for summary in summaries:
            line = {
                **asdict(summary.case),
                "runs": summary.runs,
                "ok": summary.ok,
                "invalid": summary.invalid,
            }
            for figure, interval in summary.figures.items():
                parts = (interval.mean, interval.low, interval.high)
                line.update(zip((figure, f"{figure} low95", f"{figure} high95"), parts, strict=True))
            writer.writerow({k: "" if v is None else v for k, v in line.items()})


def write_json(rows: list[PerfRow], path: Path, meta: dict) -> None:
    summaries = [asdict(s) for s in case_summaries(rows)]
    document = {**meta, "rows": [r.to_json() for r in rows], "cases": summaries}
    path.write_text(json.dumps(document, indent=1, default=str))


def _groups(summaries: list[CaseSummary]) -> dict[tuple, list[CaseSummary]]:
    """Cases by everything but message and middleware (with its path): one Table 2 each."""
    groups: dict[tuple, list[CaseSummary]] = defaultdict(list)
    for summary in summaries:
        c = summary.case
        network = c.network if c.vpn == "none" else f"{c.network} + vpn {c.vpn}"
        groups[(network, c.security, c.qos, c.mode, c.subscribers, c.rate_hz)].append(summary)
    return groups


def _title(key: tuple, repetitions: int) -> str:
    network, security, qos, mode, subscribers, rate = key
    what = "mean round trip" if mode == "roundtrip" else "mean one-way latency"
    subs = f", {subscribers} subscribers" if subscribers > 1 else ""
    over = f", mean +- 95 % interval over {repetitions} repetitions" if repetitions > 1 else ""
    return f"{what} (ms), network {network}, security {security}, QoS {qos}, {rate_text(rate)}{subs}{over}"


def column(case: PerfCase) -> str:
    """A middleware column of Table 2: its name, and the values of the family fields it reads (a
    path, say)."""
    settings = " ".join(value for value in case.family_values().values() if value)
    return f"{case.middleware} ({settings})" if settings else case.middleware


def _cell(summary: CaseSummary | None) -> str:
    interval = summary.figures["latency_mean (ms)"] if summary else None
    if interval is None or interval.mean is None:
        return "-"
    if interval.low is None or interval.high is None:
        return f"{interval.mean:.2f}"
    return f"{interval.mean:.2f} +- {interval.high - interval.mean:.2f}"


def table2(rows: list[PerfRow]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, cells) per group: message rows, middleware columns, "-" for a failed case;
    with repetitions, the mean over the ok ones +- its 95 % interval."""
    tables = []
    for key, group in _groups(case_summaries(rows)).items():
        middlewares = list(dict.fromkeys(column(s.case) for s in group))
        messages = list(dict.fromkeys(s.case.message for s in group))
        cell = {(s.case.message, column(s.case)): s for s in group}
        cells = [[message, *(_cell(cell.get((message, mw))) for mw in middlewares)] for message in messages]
        repetitions = max(s.runs - s.invalid for s in group)
        tables.append((_title(key, repetitions), ["message", *middlewares], cells))
    return tables


def table2_markdown(rows: list[PerfRow]) -> str:
    out = []
    for title, header, cells in table2(rows):
        out += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(line) + " |" for line in cells]
        out.append("")
    return "\n".join(out)


def write_plots(rows: list[PerfRow], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    tables = table2(rows)
    if tables:
        fig, axes = plt.subplots(len(tables), 1, figsize=(9, 1.0 + 0.45 * sum(len(t[2]) + 2 for t in tables)))
        for ax, (title, header, cells) in zip(list(getattr(axes, "flat", [axes])), tables, strict=True):
            ax.axis("off")
            ax.set_title(title, fontsize=9)
            ax.table(cellText=cells, colLabels=header, loc="center", cellLoc="center").scale(1, 1.3)
        fig.tight_layout()
        written.append(out_dir / "table2.png")
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)
    written += _throughput_plot(rows, out_dir, plt)
    return written


def _throughput_plot(rows: list[PerfRow], out_dir: Path, plt: ModuleType) -> list[Path]:  # matplotlib.pyplot
    """Fig. 6's form: received throughput per message, one bar per middleware, one panel per network."""
    ok = [s for s in case_summaries(rows) if s.ok]
    if not ok:
        return []
    networks = list(dict.fromkeys(s.case.network for s in ok))
    fig, axes = plt.subplots(1, len(networks), figsize=(5 * len(networks), 4), squeeze=False)
    for ax, network in zip(axes[0], networks, strict=True):
        sub = [s for s in ok if s.case.network == network]
        middlewares = list(dict.fromkeys(column(s.case) for s in sub))
        messages = list(dict.fromkeys(s.case.message for s in sub))
        width = 0.8 / max(len(middlewares), 1)
        for j, mw in enumerate(middlewares):
            values = {s.case.message: s.figures["throughput_received (B/s)"].mean or 0.0
                      for s in sub if column(s.case) == mw}  # fmt: skip
            xs = [i + j * width for i in range(len(messages))]
            ax.bar(xs, [values.get(m, 0.0) for m in messages], width, label=mw)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(messages))], messages, rotation=45, ha="right")
        ax.set_yscale("log")  # 1 KB to 2 MB at one rate: three orders of magnitude
        ax.set_ylabel("received throughput (bytes/s)")
        ax.set_title(f"network {network}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "throughput.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]


def write_all(rows: list[PerfRow], out_dir: Path, meta: dict, plots: bool = True) -> list[Path]:
    """The sweep's files, and its PNG plots unless ``plots`` is False."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out_dir / "perf.csv")
    write_subscribers_csv(rows, out_dir / "subscribers.csv")
    write_cases_csv(case_summaries(rows), out_dir / "cases.csv")
    write_json(rows, out_dir / "perf.json", meta)
    (out_dir / "table2.md").write_text(table2_markdown(rows))
    names = ("perf.csv", "subscribers.csv", "cases.csv", "perf.json", "table2.md")
    paths = [out_dir / name for name in names]
    return paths + (write_plots(rows, out_dir) if plots else [])
