"""Latency and loss traces for ``fieldtest predict``: one sample per message sent, read from the
formats labs already have. Each reader returns a ``LinkTrace`` (send time in seconds from the trace's
start, one-way latency in seconds, NaN for a lost message); a file it cannot use raises
``TraceError`` with one line naming the file and the problem.

- a trial directory of the kit (trial.yaml with host/ and robot/ bags): the commands' one-way
  latency on the host clock, as the analysis computes it (lost commands NaN);
- the kit's robot bag alone (rosbag2, MCAP or sqlite3): its command receipts, with the latency the
  robot logged live;
- the kit's ``latency.csv`` or any CSV with a send-time column (``sent_s``, ``send_s``, ``t_s``,
  ``time_s``) and a latency column (``one_way_ms``, ``latency_ms``, ``latency_s``), optionally
  ``received``/``lost`` (0/1); an empty latency cell is a lost message;
- ApexAI performance_test CSV (a header row starting ``T_experiment``; one row per
  ``T_loop`` window with ``sent``, ``lost`` and ``latency_mean (ms)``/``latency_max (ms)``):
  each window becomes ``sent`` messages evenly spaced, the last ``lost`` of them lost in one burst
  (the worst place for them), one at the window's maximum latency and the rest at its mean;
- Linux iputils ``ping`` output (``icmp_seq=N ... time=T ms``, with or without ``-D`` stamps):
  one-way latency taken as half the round trip, the missing sequence numbers lost, sent every
  ``interval_s`` (ping's ``-i``, 1 s unless given) or at the ``-D`` stamps;
- a ``fieldtest perf`` row directory (spec.json, main.json, relay1.json), or a ``fieldtest perf``
  output directory holding exactly one row: each measured message's one-way latency as the first
  relay logged it (arrival - send on the machine's shared monotonic clock), the sequence numbers it
  never got lost, send times from the main side's.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from fieldtest.errors import FieldtestError

PERF_TEST_HEADER = "T_experiment"  # performance_test analysis_result.cpp csv_header()
PING_REPLY = re.compile(r"icmp_seq=(\d+)\b.*?\btime[=<]([0-9.]+)\s*ms")
PING_STAMP = re.compile(r"^\[(\d+\.\d+)\]")
PING_TRANSMITTED = re.compile(r"(\d+) packets transmitted")
SEND_COLUMNS = ("sent_s", "send_s", "t_s", "time_s", "send_time_s")
LATENCY_COLUMNS = {"one_way_ms": 1e-3, "latency_ms": 1e-3, "latency_s": 1.0}
# a perf row directory and a sweep's output, as fieldtest/perf/run.py and cli.py write them
PERF_SPEC, PERF_MAIN, PERF_RELAY, PERF_ROWS, PERF_SWEEP = (
    "spec.json", "main.json", "relay1.json", "rows", "perf.json"
)  # fmt: skip


class TraceError(FieldtestError, ValueError):
    """A trace that cannot be read; the message names the file and the problem."""


@dataclass
class LinkTrace:
    """Per message: send time (s from the trace's start) and one-way latency (s, NaN = lost)."""

    t_s: np.ndarray
    latency_s: np.ndarray
    source: str
    kind: str
    notes: list[str] = field(default_factory=list)

    @property
    def lost(self) -> np.ndarray:
        lost: np.ndarray = ~np.isfinite(self.latency_s)
        return lost

    def summary(self) -> dict:
        got = self.latency_s[~self.lost]
        return {
            "source": self.source,
            "kind": self.kind,
            "messages": int(len(self.t_s)),
            "lost": int(np.count_nonzero(self.lost)),
            "duration_s": float(self.t_s[-1] - self.t_s[0]) if len(self.t_s) else 0.0,
            "latency_median_ms": float(np.median(got) * 1e3) if len(got) else None,
            "latency_p99_ms": float(np.percentile(got, 99) * 1e3) if len(got) else None,
            "longest_outage_s": longest_outage_s(self),
            "longest_loss_s": longest_loss_s(self),
            "notes": list(self.notes),
        }


def longest_outage_s(trace: LinkTrace) -> float:
    """Longest time between two consecutive arrivals (send + latency) of received messages."""
    arrivals = np.sort((trace.t_s + trace.latency_s)[~trace.lost])
    return float(np.max(np.diff(arrivals))) if len(arrivals) > 1 else 0.0


def longest_loss_s(trace: LinkTrace) -> float:
    """Sending time of the longest run of consecutive lost messages (run length x the median send
    interval): an outage as the envelope counts it."""
    if len(trace.t_s) < 2 or not trace.lost.any():
        return 0.0
    lost = np.concatenate([[0], trace.lost.astype(int), [0]])
    edges = np.flatnonzero(np.diff(lost))
    longest = int(np.max(edges[1::2] - edges[::2]))
    return longest * float(np.median(np.diff(trace.t_s)))


def make_trace(
    t_s: ArrayLike, latency_s: ArrayLike, source: str, kind: str, notes: list[str] | None = None
) -> LinkTrace:
    t = np.asarray(t_s, dtype=float)
    lat = np.asarray(latency_s, dtype=float)
    if len(t) == 0:
        raise TraceError(f"{source}: empty trace (no message in it)")
    order = np.argsort(t, kind="stable")
    t, lat = t[order], lat[order]
    if not np.any(np.isfinite(lat)):
        raise TraceError(f"{source}: every message in the trace is lost (nothing to predict from)")
    return LinkTrace(t - t[0], lat, source, kind, notes or [])


def read_trace(path: str | Path, ping_interval_s: float | None = None) -> LinkTrace:
    """Read a trace of any supported format (detected from the file's content)."""
    path = Path(path)
    if path.is_dir() and (path / "trial.yaml").is_file():
        return trial_trace(path)
    if path.is_dir() and (path / PERF_SPEC).is_file():
        return perf_row_trace(path)
    if path.is_dir() and (path / PERF_SWEEP).is_file() and (path / PERF_ROWS).is_dir():
        return perf_row_trace(only_perf_row(path))
    if path.suffix in (".mcap", ".db3") or (path.is_dir() and any(path.glob("*.mcap"))):
        return bag_trace(path)
    if path.is_dir():
        raise TraceError(
            f"{path}: a folder that is neither a trial (trial.yaml), a rosbag2 bag nor fieldtest perf output"
        )
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise TraceError(f"{path}: empty file")
    if PING_REPLY.search(text) or "PING " in text[:200]:
        return ping_trace(text, str(path), ping_interval_s)
    lines = text.splitlines()
    if any(line.lstrip().startswith(PERF_TEST_HEADER) for line in lines):
        return perf_test_trace(lines, str(path))
    return csv_trace(lines, str(path))


def trial_trace(trial_dir: Path) -> LinkTrace:
    """The commands' one-way latency of a recorded trial (host clock, seconds from stream start)."""
    from fieldtest.analysis.loading.trialdata import AnalysisError, load_trial
    from fieldtest.analysis.metrics.latency import estimate_clock, latency_metrics
    from fieldtest.record import TrialFormatError

    if not (trial_dir / "trial.yaml").is_file():
        raise TraceError(f"{trial_dir}: not a trial directory (no trial.yaml)")
    try:
        data = load_trial(trial_dir)
    except (AnalysisError, TrialFormatError) as exc:
        raise TraceError(str(exc)) from None
    if data.commands is None or data.receipts is None:
        raise TraceError(f"{trial_dir}: {'; '.join(data.problems) or 'no commands or receipts'}")
    _, series = latency_metrics(data, estimate_clock(data), [])
    t = np.concatenate([series.sent_s, series.lost_sent_s])
    lat = np.concatenate([series.one_way_ms / 1e3, np.full(len(series.lost_sent_s), np.nan)])
    trace = make_trace(t, lat, str(trial_dir), "trial")
    trace.t_s = trace.t_s + float(np.min(t))  # keep stream time: tick k at k / rate
    return trace


def bag_trace(path: Path) -> LinkTrace:
    """The robot bag of the kit (``/fieldtest/command_receipts``): each receipt's send time and the
    latency the robot logged with its live clock-offset estimate; the sequence numbers it never
    logged between its first and last are lost. A trial directory gives the analysis' fitted clock."""
    from fieldtest.analysis.loading import fastbag
    from fieldtest.record import CMD_VEL_TOPIC, RECEIPTS_TOPIC, BagError

    try:
        raw = fastbag.read_raw(path, {RECEIPTS_TOPIC, CMD_VEL_TOPIC})
    except BagError as exc:
        raise TraceError(str(exc)) from None
    got = fastbag.topic_arrays(raw, RECEIPTS_TOPIC)
    if got is None or not len(got[0]):
        what = "a host bag has send times only" if raw.count(CMD_VEL_TOPIC) else "no command receipts"
        raise TraceError(f"{path}: {what}; give the robot bag (robot/) or the trial directory")
    _, f = got
    seq, first = np.unique(f["seq"].astype(np.int64), return_index=True)
    sent = fastbag.stamp_ns(f["sent_sec"], f["sent_nanosec"])[first].astype(float) / 1e9
    latency = f["latency_s"][first].astype(float)
    every = np.arange(seq[0], seq[-1] + 1)
    t = np.interp(every, seq, sent)  # a lost command's send time from its neighbours' (ticks are even)
    lat = np.full(len(every), np.nan)
    lat[np.searchsorted(every, seq)] = latency
    notes = ["latency from the robot's live clock-offset estimate (a trial directory uses the fitted one)"]
    return make_trace(t, lat, str(path), "rosbag2", notes)


def only_perf_row(out_dir: Path) -> Path:
    """The one row directory of a ``fieldtest perf`` output; several (or none) is a one-line error."""
    rows = sorted(p for p in (out_dir / PERF_ROWS).iterdir() if (p / PERF_SPEC).is_file())
    if len(rows) == 1:
        return rows[0]
    listed = ", ".join(f"{PERF_ROWS}/{p.name}" for p in rows) or "none that ran"
    raise TraceError(
        f"{out_dir}: fieldtest perf output with {len(rows)} rows ({listed}); pass one row directory"
    )


def _perf_record(row_dir: Path, name: str) -> dict:
    try:
        record: dict = json.loads((row_dir / name).read_text())
        return record
    except FileNotFoundError:
        raise TraceError(f"{row_dir}: perf row without {name} (the row did not run; see perf.json)") from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"{row_dir / name}: not a perf record ({exc})") from None


def perf_row_trace(row_dir: Path) -> LinkTrace:
    """One ``fieldtest perf`` row: each measured message's one-way latency at the first relay."""
    spec, main = _perf_record(row_dir, PERF_SPEC), _perf_record(row_dir, PERF_MAIN)
    relay = _perf_record(row_dir, PERF_RELAY)
    sends = np.asarray(main.get("sends") or [], dtype=np.int64)  # index = sequence number
    if not len(sends):
        raise TraceError(f"{row_dir / PERF_MAIN}: no measured message sent (sends is empty)")
    latency = np.full(len(sends), np.nan)
    for seq, sent_ns, arrival_ns, *_ in reversed(relay.get("arrivals") or []):
        if 0 <= seq < len(sends):  # reversed: a duplicate keeps its first arrival
            latency[seq] = (arrival_ns - sent_ns) / 1e9
    what = f"{spec.get('message', '?')} at {spec.get('rate_hz', 0):g} Hz ({spec.get('mode', '?')})"
    notes = [
        f"fieldtest perf row: the link's behaviour for {what}, relay 1's one-way latency, "
        "replayed onto the plan's command times (each command takes the message sent nearest it)"
    ]
    return make_trace((sends - sends[0]) / 1e9, latency, str(row_dir), "fieldtest perf", notes)


def ping_trace(text: str, source: str, interval_s: float | None) -> LinkTrace:
    replies: dict[int, tuple[float, float | None]] = {}
    for line in text.splitlines():
        m = PING_REPLY.search(line)
        if m is None:
            continue
        stamp = PING_STAMP.match(line.strip())
        replies.setdefault(
            int(m.group(1)), (float(m.group(2)) / 1e3, float(stamp.group(1)) if stamp else None)
        )
    if not replies:
        raise TraceError(f"{source}: ping output without any reply (no 'icmp_seq=.. time=.. ms' line)")
    transmitted = PING_TRANSMITTED.search(text)
    first, last = min(replies), max(replies)
    if transmitted:  # trailing losses show only in the summary
        last = max(last, first + int(transmitted.group(1)) - 1)
    numbers = range(first, last + 1)
    seqs = np.arange(first, last + 1)
    rtt = np.array([replies[s][0] if s in replies else np.nan for s in numbers])
    # a -D stamp is when the reply arrived: the request left one round trip before
    answered = [replies[s] for s in numbers if s in replies]
    sends = [stamp_s - rtt_s for rtt_s, stamp_s in answered if stamp_s is not None]
    notes = ["one-way latency = half the ping round trip"]
    known = np.array([s in replies for s in numbers])
    if interval_s is None and len(sends) == np.count_nonzero(known) and len(sends) > 1:
        t = np.interp(seqs, seqs[known], np.array(sends))
        notes.append("send times from ping -D stamps")
    else:
        interval_s = 1.0 if interval_s is None else interval_s
        t = (seqs - first) * interval_s
        notes.append(f"one ping every {interval_s:g} s")
    return make_trace(t, rtt / 2, source, "ping", notes)


def perf_test_trace(lines: list[str], source: str) -> LinkTrace:
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(PERF_TEST_HEADER))
    rows = list(csv.reader(lines[start:]))
    header = [h.strip() for h in rows[0]]
    need = ("T_experiment", "T_loop", "sent", "lost", "latency_mean (ms)", "latency_max (ms)")
    missing = [name for name in need if name not in header]
    if missing:
        raise TraceError(f"{source}: performance_test CSV without column(s) {', '.join(missing)}")
    col = {name: header.index(name) for name in need}
    t_all, lat_all = [], []
    for n, row in enumerate(rows[1:], start=start + 2):
        if not any(cell.strip() for cell in row):
            continue
        try:
            v = {name: float(row[i]) for name, i in col.items()}
        except (ValueError, IndexError):
            raise TraceError(f"{source}: line {n}: not a number in a performance_test column") from None
        sent, lost = int(v["sent"]), int(v["lost"])
        if sent <= 0:
            continue
        t0 = v["T_experiment"] - v["T_loop"]
        t = t0 + (np.arange(sent) + 0.5) * v["T_loop"] / sent
        lat = np.full(sent, v["latency_mean (ms)"] / 1e3)
        lat[0] = v["latency_max (ms)"] / 1e3
        if lost:
            lat[sent - min(lost, sent) :] = np.nan
        t_all.append(t)
        lat_all.append(lat)
    if not t_all:
        raise TraceError(f"{source}: performance_test CSV with no row that sent anything")
    notes = ["performance_test windows: lost messages in one burst at each window's end"]
    return make_trace(np.concatenate(t_all), np.concatenate(lat_all), source, "performance_test", notes)


def csv_trace(lines: list[str], source: str) -> LinkTrace:
    rows = list(csv.reader(lines))
    header = [h.strip() for h in rows[0]]
    send = next((c for c in SEND_COLUMNS if c in header), None)
    latency = next((c for c in LATENCY_COLUMNS if c in header), None)
    if send is None or latency is None:
        raise TraceError(
            f"{source}: unknown trace format (not ping output, not performance_test CSV, and no CSV "
            f"header with a send time ({'/'.join(SEND_COLUMNS)}) and a latency ({'/'.join(LATENCY_COLUMNS)}))"
        )
    scale = LATENCY_COLUMNS[latency]
    flag = next((c for c in ("received", "lost") if c in header), None)
    t, lat = [], []
    for n, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        cells = dict(zip(header, (cell.strip() for cell in row), strict=False))
        try:
            t.append(float(cells[send]))
            value = float(cells[latency]) * scale if cells.get(latency) else math.nan
            if flag is not None and (cells.get(flag) or "0") != ("1" if flag == "received" else "0"):
                value = math.nan
        except ValueError:
            raise TraceError(f"{source}: line {n}: {send} or {latency} is not a number") from None
        lat.append(value)
    return make_trace(t, lat, source, "csv")
