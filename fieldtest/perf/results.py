"""A sweep's rows as files: ``perf.csv`` (performance_test's column names where they mean the same),
``subscribers.csv`` (one line per receiver), ``perf.json`` (every figure, per subscriber and per process), ``table2.md``/``table2.png`` (Zhang et
al.'s Table 2: mean latency per message and middleware, "-" where the case failed) and
``throughput.png`` (their Fig. 6: throughput per message and middleware)."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

from .run import PerfRow

CASE_COLUMNS = ("middleware", "security", "qos", "network", "message", "rate_hz", "duration_s",
                "subscribers", "mode")  # fmt: skip
_LATENCY = ("min", "max", "mean", "variance")
FIGURE_COLUMNS = (
    "T_experiment", "T_loop", "received", "sent", "lost", "relative_loss", "data_received",
    *(f"latency_{k} (ms)" for k in _LATENCY),
    "ru_utime", "ru_stime", "ru_maxrss", "cpu_usage (%)",
    # the kit's own, beyond performance_test's
    "size (B)", "throughput_sent (B/s)", "throughput_received (B/s)", "late_sends",
    *(f"round_trip_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    *(f"one_way_{k} (ms)" for k in (*_LATENCY, "p50", "p90", "p99")),
    "relay_ru_maxrss", "relay_cpu_usage (%)", "relay_decode_mean (ms)", "relay_echo_mean (ms)",
)  # fmt: skip
COLUMNS = (*CASE_COLUMNS, "status", "error", *FIGURE_COLUMNS)


def csv_row(row: PerfRow) -> dict:
    case = {k: getattr(row.case, k) for k in CASE_COLUMNS}
    return {
        **case,
        "status": row.status,
        "error": row.error,
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
        writer = csv.DictWriter(out, fieldnames=(*CASE_COLUMNS, *SUBSCRIBER_COLUMNS))
        writer.writeheader()
        for row in rows:
            case = {k: getattr(row.case, k) for k in CASE_COLUMNS}
            for sub in row.subscribers:
                values = {k: sub.get(k) for k in SUBSCRIBER_COLUMNS}
                writer.writerow({**case, **{k: "" if v is None else v for k, v in values.items()}})


def write_json(rows: list[PerfRow], path: Path, meta: dict) -> None:
    path.write_text(json.dumps({**meta, "rows": [r.to_json() for r in rows]}, indent=1, default=str))


def _groups(rows: list[PerfRow]) -> dict[tuple, list[PerfRow]]:
    """Rows by everything but message and middleware: one Table 2 each."""
    groups: dict[tuple, list[PerfRow]] = defaultdict(list)
    for row in rows:
        c = row.case
        groups[(c.network, c.security, c.qos, c.mode, c.subscribers, c.rate_hz)].append(row)
    return groups


def _title(key: tuple) -> str:
    network, security, qos, mode, subscribers, rate = key
    what = "mean round trip" if mode == "roundtrip" else "mean one-way latency"
    subs = f", {subscribers} subscribers" if subscribers > 1 else ""
    return f"{what} (ms), network {network}, security {security}, QoS {qos}, {rate:g} Hz{subs}"


def table2(rows: list[PerfRow]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, cells) per group: message rows, middleware columns, "-" for a failed case."""
    tables = []
    for key, group in _groups(rows).items():
        middlewares = list(dict.fromkeys(r.case.middleware for r in group))
        messages = list(dict.fromkeys(r.case.message for r in group))
        cell = {(r.case.message, r.case.middleware): r for r in group}
        cells = []
        for message in messages:
            line = [message]
            for mw in middlewares:
                row = cell.get((message, mw))
                mean = row.figures.get("latency_mean (ms)") if row and row.status == "ok" else None
                line.append("-" if mean is None else f"{mean:.2f}")
            cells.append(line)
        tables.append((_title(key), ["message", *middlewares], cells))
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


def _throughput_plot(rows: list[PerfRow], out_dir: Path, plt) -> list[Path]:
    """Fig. 6's form: received throughput per message, one bar per middleware, one panel per network."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return []
    networks = list(dict.fromkeys(r.case.network for r in ok))
    fig, axes = plt.subplots(1, len(networks), figsize=(5 * len(networks), 4), squeeze=False)
    for ax, network in zip(axes[0], networks, strict=True):
        sub = [r for r in ok if r.case.network == network]
        middlewares = list(dict.fromkeys(r.case.middleware for r in sub))
        messages = list(dict.fromkeys(r.case.message for r in sub))
        width = 0.8 / max(len(middlewares), 1)
        for j, mw in enumerate(middlewares):
            values = {r.case.message: r.figures.get("throughput_received (B/s)", 0) for r in sub
                      if r.case.middleware == mw}  # fmt: skip
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


def write_all(rows: list[PerfRow], out_dir: Path, meta: dict) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out_dir / "perf.csv")
    write_subscribers_csv(rows, out_dir / "subscribers.csv")
    write_json(rows, out_dir / "perf.json", meta)
    (out_dir / "table2.md").write_text(table2_markdown(rows))
    paths = [out_dir / name for name in ("perf.csv", "subscribers.csv", "perf.json", "table2.md")]
    return paths + write_plots(rows, out_dir)
