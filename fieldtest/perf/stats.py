"""Reduce the main side's and the relays' records to one row's figures.

Column names are performance_test's where they mean the same (its ``AnalysisResult::csv_header``):
``T_experiment``, ``T_loop``, ``received``, ``sent``, ``lost``, ``relative_loss``, ``data_received``,
``latency_min/max/mean/variance (ms)``, ``ru_utime``, ``ru_stime``, ``ru_maxrss``, ``cpu_usage (%)``.
As in performance_test, ``latency_*`` is what the mode measures: the round trip in ``roundtrip``
mode (Main/Relay), the one-way latency in ``one-way`` mode. Both are also given under their own
names (``round_trip_*``, ``one_way_*``: main to relay, ``one_way_back_*``: the echo, relay to
main). One-way figures subtract one machine's stamp from another's: they exist where every process
shares a clock (the twin), and in the lab once the relay's stamps are put on the host's clock with an
estimated offset (``fieldtest.perf.labperf``). Unlike performance_test, which prints one line per
second, a row is the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .case import PerfCase, PerfRow
from .messages import PerfMessage


def _latency(prefix: str, values_ms: list[float]) -> dict:
    if not values_ms:
        keys = ("min", "max", "mean", "variance", "p50", "p90", "p99")
        return {f"{prefix}_{k} (ms)": None for k in keys}
    v = np.asarray(values_ms)
    return {
        f"{prefix}_min (ms)": float(v.min()),
        f"{prefix}_max (ms)": float(v.max()),
        f"{prefix}_mean (ms)": float(v.mean()),
        f"{prefix}_variance (ms)": float(v.var()),
        f"{prefix}_p50 (ms)": float(np.percentile(v, 50)),
        f"{prefix}_p90 (ms)": float(np.percentile(v, 90)),
        f"{prefix}_p99 (ms)": float(np.percentile(v, 99)),
    }


def _first_per_seq(entries: list, sent: dict[int, int], column: int = 2) -> dict[int, int]:
    """seq -> ``column`` (the arrival) of the first copy of each measured message (duplicates
    counted once)."""
    out: dict[int, int] = {}
    for entry in entries:
        if entry[0] in sent and entry[0] not in out:
            out[entry[0]] = entry[column]
    return out


def relay_stages(sent: dict[int, int], arrivals: list) -> dict:
    """Where a relay's turn-around goes (ms, mean): from the transport's arrival stamp to the decoded
    message in the callback (queue, copy, deserialization), and from there to the echo's send call
    returning (frame id, serialization, write)."""
    firsts: dict[int, list] = {}
    for entry in arrivals:
        if entry[0] in sent and len(entry) >= 5:
            firsts.setdefault(entry[0], entry)
    if not firsts:
        return {"relay_decode_mean (ms)": None, "relay_echo_mean (ms)": None}
    entries = np.asarray(list(firsts.values()), dtype=np.int64)
    return {
        "relay_decode_mean (ms)": float(np.mean(entries[:, 3] - entries[:, 2]) / 1e6),
        "relay_echo_mean (ms)": float(np.mean(entries[:, 4] - entries[:, 3]) / 1e6),
    }


def echo_latencies(sent: dict[int, int], echoes: list) -> list[float]:
    """The echoes' own one-way latencies (ms): arrival at the main side minus the relay's send stamp,
    first copy of each measured message, in seq order."""
    got = {}
    for seq, stamp_ns, arrival_ns in echoes:
        if seq in sent and seq not in got:
            got[seq] = (arrival_ns - stamp_ns) / 1e6
    return [got[s] for s in sorted(got)]


def subscriber_latencies(sent: dict[int, int], entries: list) -> list[float]:
    """Latencies (ms) of the measured messages in ``entries``, first copy of each, in seq order."""
    got = _first_per_seq(entries, sent)
    return [(got[s] - sent[s]) / 1e6 for s in sorted(got)]


def subscriber_figures(
    index: int, sent: dict[int, int], one_way: list[float], round_trip: list[float] | None
) -> dict:
    """One subscriber's counts, loss and latencies (one-way from its arrivals, round trip from its echoes)."""
    figures = {
        "subscriber": index,
        "sent": len(sent),
        "received": len(one_way),
        "lost": len(sent) - len(one_way),
    }
    figures.update(_latency("one_way", one_way))
    if round_trip is not None:
        figures["echoed"] = len(round_trip)
        figures["round_trip_lost"] = len(sent) - len(round_trip)
        figures.update(_latency("round_trip", round_trip))
    return figures


def late_echoes(main: dict, relays: int) -> int | None:
    """Echoes that reached the main side after the row's planned end (last send + drain), in its
    grace: delivered late, not lost (None: a record from before the grace was kept)."""
    end_ns = main.get("planned_end_ns")
    if end_ns is None:
        return None
    sent = dict(enumerate(main["sends"]))
    echoes = main["echoes"]
    return sum(
        arrival > end_ns
        for i in range(1, relays + 1)
        for arrival in _first_per_seq(echoes.get(str(i), []), sent).values()
    )


def reduce_row(case: PerfCase, message: PerfMessage, records: dict) -> PerfRow:
    main = records["main"]
    sent = dict(enumerate(main["sends"]))
    roundtrip = case.mode == "roundtrip"
    one_way: list[float] = []
    one_way_back: list[float] = []
    round_trip: list[float] = []
    subs = []
    for i in range(1, case.subscribers + 1):
        own = subscriber_latencies(sent, records[f"relay{i}"]["arrivals"])
        back = subscriber_latencies(sent, main["echoes"].get(str(i), [])) if roundtrip else None
        one_way += own
        one_way_back += echo_latencies(sent, main["echoes"].get(str(i), [])) if roundtrip else []
        round_trip += back or []
        subs.append(subscriber_figures(i, sent, own, back))
        subs[-1].update(relay_stages(sent, records[f"relay{i}"]["arrivals"]))
    row = PerfRow(case, subscribers=subs)
    if not sent:
        row.status, row.error = "failed", "no message was sent"
    elif main.get("interrupted"):
        row.status, row.error = "failed", "interrupted before the row ended"
    row.figures = _row_figures(case, message, main, subs, records, one_way, round_trip)
    row.figures.update(_latency("one_way_back", one_way_back))
    if row.status == "ok" and (held := rate_not_held(case, row.figures)):
        row.status, row.error = "failed", held
    return row


def rate_not_held(case: PerfCase, figures: dict) -> str:
    """Why the row did not run at its rate, or "": at least half its messages left after their
    successor's due time and the sends took more than 10 % longer than planned (a link or
    middleware that blocks the sender; a busy machine's pause delays a few messages, not half)."""
    if case.rate_hz == 0:
        return ""  # saturation: no rate to hold
    planned_s = figures["sent"] / case.rate_hz
    if figures["late_sends"] * 2 >= figures["sent"] and figures["T_loop"] > 1.1 * planned_s:
        return (
            f"rate not held: {figures['sent']} messages at {case.rate_hz:g} Hz took {figures['T_loop']:.1f} s "
            f"instead of {planned_s:.1f} s ({figures['late_sends']} sent late)"
        )
    return ""


def _row_figures(
    case: PerfCase,
    message: PerfMessage,
    main: dict,
    subs: list[dict],
    records: dict,
    one_way: list[float],
    round_trip: list[float],
) -> dict:
    sends = main["sends"]
    t_loop = _loop_s(sends, case.rate_hz, main.get("send_end_ns"))
    roundtrip = case.mode == "roundtrip"
    received = len(round_trip) if roundtrip else len(one_way)
    expected = len(sends) * len(subs)
    t_delivery = max(t_loop, _delivery_s(sends, records, len(subs))) if case.rate_hz == 0 else t_loop
    delivered_per_sub = len(one_way) / len(subs) / t_delivery if t_delivery else 0.0
    figures = {
        "T_experiment": round(t_loop, 3),
        "T_loop": round(t_loop, 3),
        "received": received,
        "sent": len(sends),
        "lost": expected - received,
        "relative_loss": (expected - received) / expected if expected else None,
        "data_received": received * message.size,
        "size (B)": message.size,
        "late_sends": main.get("late_sends", 0),
        "throughput_sent (B/s)": len(sends) * message.size / t_loop if t_loop else 0.0,
        # per subscriber, one way: what one receiver got per second (in saturation, over the time
        # from the first send to the last arrival: what the writer still held arrives after it)
        "throughput_received (B/s)": delivered_per_sub * message.size,
        "throughput_sent (msg/s)": len(sends) / t_loop if t_loop else 0.0,
        "throughput_received (msg/s)": delivered_per_sub,
        "throughput_sent (MB/s)": len(sends) * message.size / t_loop / 1e6 if t_loop else 0.0,
        "throughput_received (MB/s)": delivered_per_sub * message.size / 1e6,
        "writer_timeouts": main.get("writer_timeouts", 0),
        "writer_backlog_max": main.get("writer_backlog_max"),
        "received_late": late_echoes(main, len(subs)) if roundtrip else None,
    }
    figures.update(_latency("latency", round_trip if roundtrip else one_way))
    figures.update(_latency("one_way", one_way))
    figures.update(_latency("round_trip", round_trip))
    figures.update(subs[0] and {k: v for k, v in subs[0].items() if k.startswith("relay_")})
    figures.update(_usage("", main, t_loop))
    if "relay1" in records:
        figures.update(_usage("relay_", records["relay1"], t_loop))
    return figures


def _loop_s(sends: list[int], rate_hz: float, end_ns: int | None = None) -> float:
    """performance_test's T_loop: the sends' span plus one period; in saturation, from the first
    send to the return of the last write (``end_ns``)."""
    if not sends:
        return 0.0
    if rate_hz:
        return (sends[-1] - sends[0]) / 1e9 + 1.0 / rate_hz
    return max(end_ns or sends[-1], sends[-1] + 1) / 1e9 - sends[0] / 1e9


def _delivery_s(sends: list[int], records: dict, subscribers: int) -> float:
    """From the first send to the last arrival of a measured message at any relay (s)."""
    last = max(
        (
            e[2]
            for i in range(1, subscribers + 1)
            for e in records[f"relay{i}"]["arrivals"]
            if 0 <= e[0] < len(sends)
        ),
        default=sends[0] if sends else 0,
    )
    return (last - sends[0]) / 1e9 if sends else 0.0


def _usage(prefix: str, record: dict, t_loop: float) -> dict:
    """ru_* at the end; cpu_usage over the measured messages only (start-up and discovery left out)."""
    usage, start = record["usage"], record.get("usage_start") or {}
    cpu_s = usage["ru_utime"] + usage["ru_stime"] - start.get("ru_utime", 0.0) - start.get("ru_stime", 0.0)
    return {
        f"{prefix}ru_utime": usage["ru_utime"],
        f"{prefix}ru_stime": usage["ru_stime"],
        f"{prefix}ru_maxrss": usage["ru_maxrss"],
        f"{prefix}cpu_usage (%)": 100.0 * cpu_s / t_loop if t_loop else None,
    }


CONFIDENCE = 0.95


@dataclass(frozen=True)
class MeanInterval:
    """A figure over the valid repetitions: how many, their mean and its 95 % interval (None
    where there are too few)."""

    n: int
    mean: float | None
    low: float | None
    high: float | None


def mean_interval(values: list[float | None]) -> MeanInterval:
    """The mean of the valid repetitions and its 95 % interval (Student's t, n - 1 degrees of
    freedom: the repetitions are few, their spread unknown); no interval below 2 repetitions."""
    v = np.array([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    n = len(v)
    if n == 0:
        return MeanInterval(0, None, None, None)
    mean = float(v.mean())
    if n < 2:
        return MeanInterval(1, mean, None, None)
    from scipy import stats  # evo's dependency; seconds to import, so only for an interval

    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return MeanInterval(n, mean, mean - half, mean + half)
