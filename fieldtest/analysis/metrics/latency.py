"""Link metrics from the command stream: clock correction, one-way latency, loss, jitter, round trip.

See docs/analysis.md, "Link latency", for the definitions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fieldtest.analysis.loading.trialdata import Probes, TrialData
from fieldtest.analysis.metrics.readerstalls import lost_to_reader_stalls
from fieldtest.analysis.metrics.schema import (
    SHARED_CLOCK,
    ClockCorrection,
    Fault,
    FaultLatency,
    Latency,
    NtpEstimate,
    PathAsymmetry,
    Stats,
)
from fieldtest.analysis.metrics.series import LatencySeries
from fieldtest.analysis.metrics.summarystats import finite_or_none, perftest_stats, spans
from fieldtest.analysis.metrics.timingclasses import lateness_classes
from fieldtest.qos import get_qos

PROBE_WINDOW_S = 10.0  # one minimum-delay probe per window; the offset line is fitted through them
MIN_SPAN_FOR_DRIFT_S = 30.0
PROBE_SIGMA_FLOOR_S = 50e-6  # shorter probe spans give a constant offset (a slope would be noise)


@dataclass
class ClockModel:
    """host clock - robot clock as a line in robot time: offset(t) = offset_s + drift * (t - ref)."""

    method: str  # "shared-clock", or the NTP-style "probes", "robot-live", "outcome" or "none"
    offset_s: float = 0.0
    drift: float = 0.0  # seconds per second
    ref_robot_ns: int = 0
    detail: dict[str, Any] = field(default_factory=dict)  # ClockCorrection's further fields

    def offset_at(self, robot_ns: np.ndarray) -> np.ndarray:
        dt = (np.asarray(robot_ns, dtype=np.int64) - self.ref_robot_ns).astype(float) / 1e9
        return self.offset_s + self.drift * dt

    def to_host_ns(self, robot_ns: np.ndarray) -> np.ndarray:
        """Robot-clock times on the host clock (float ns)."""
        return np.asarray(robot_ns, dtype=np.int64).astype(float) + self.offset_at(robot_ns) * 1e9

    def as_section(self) -> ClockCorrection:
        """``latency.clock`` of metrics.json."""
        return ClockCorrection(
            method=self.method,
            offset_s=self.offset_s,
            drift_ppm=self.drift * 1e6,
            reference_robot_ns=self.ref_robot_ns,
            **self.detail,
        )


def estimate_clock(data: TrialData, window_s: float = PROBE_WINDOW_S) -> ClockModel:
    """The true offset where every process read one clock (twin, ``outcome.clocks: shared``), else
    the NTP-style estimate (``estimate_ntp_clock``), which is all the lab has."""
    shared = data.record.shared_clock_offset_s()
    if shared is not None:
        return ClockModel(SHARED_CLOCK, shared, detail={"clocks": "shared"})
    return estimate_ntp_clock(data, window_s)


def estimate_ntp_clock(data: TrialData, window_s: float = PROBE_WINDOW_S) -> ClockModel:
    """Offline offset from the clock probes (minimum-delay filter), else the robot's own estimates."""
    probes = data.probes
    if probes is not None and len(probes.t1_ns):
        return _from_probes(probes, window_s)
    if data.receipts is not None and np.any(np.isfinite(data.receipts.live_offset_s)):
        live = data.receipts.live_offset_s[np.isfinite(data.receipts.live_offset_s)]
        return ClockModel("robot-live", float(np.median(live)), detail={"samples": len(live)})
    if data.record.outcome.clock_offset_s is not None:
        return ClockModel("outcome", float(data.record.outcome.clock_offset_s))
    return ClockModel("none")


def _from_probes(probes: Probes, window_s: float) -> ClockModel:
    offset, delay = probes.offset_s, probes.delay_s
    t_ns = (probes.t1_ns + probes.t4_ns) // 2  # robot time of the probe's midpoint
    ok = np.isfinite(offset) & np.isfinite(delay) & (delay >= 0)
    t_ns, offset, delay = t_ns[ok], offset[ok], delay[ok]
    if len(t_ns) == 0:
        return ClockModel("none", detail={"probes": int(len(ok)), "note": "no usable clock probe"})
    window = ((t_ns - t_ns.min()) // int(window_s * 1e9)).astype(np.int64)
    picks = np.array([np.flatnonzero(window == w)[np.argmin(delay[window == w])] for w in np.unique(window)])
    best = int(np.argmin(delay))
    span_s = float(t_ns[picks].max() - t_ns[picks].min()) / 1e9
    detail = {
        "probes": int(len(ok)),
        "used": int(len(picks)),
        "window_s": window_s,
        "min_delay_s": float(delay[best]),
        "span_s": span_s,
    }
    if len(picks) >= 3 and span_s >= MIN_SPAN_FOR_DRIFT_S:
        ref = int(np.median(t_ns[picks]))
        x = (t_ns[picks] - ref).astype(float) / 1e9
        # A probe's offset error is at most half its extra delay over the fastest probe: weight by that,
        # so a window without a fast probe hardly moves the line.
        sigma = delay[picks] - delay[best] + PROBE_SIGMA_FLOOR_S
        drift, offset0 = np.polyfit(x, offset[picks], 1, w=1.0 / sigma)
        residual = offset[picks] - (offset0 + drift * x)
        detail["residual_rms_s"] = float(np.sqrt(np.mean(residual**2)))
        detail["residual_max_s"] = float(np.max(np.abs(residual)))
        return ClockModel("probes", float(offset0), float(drift), ref, detail)
    return ClockModel("probes", float(offset[best]), 0.0, int(t_ns[best]), detail)


def latency_metrics(data: TrialData, clock: ClockModel, faults: list[Fault]) -> tuple[Latency, LatencySeries]:
    """The ``latency`` section of metrics.json and the series the latency plot draws."""
    plan = data.plan
    start = data.stream_start_ns
    # the section's fields as they are found; only these are written (metrics.json keeps them)
    out: dict[str, Any] = {"clock": clock.as_section()}
    if data.commands is not None:
        sent_seq = np.unique(data.commands.seq[data.commands.seq >= 0])
        out["expected_from"] = "host bag"
        sent_times = dict(zip(data.commands.seq.tolist(), data.commands.sent_ns.tolist(), strict=True))
        out["send_interval_ms"] = _stats(np.diff(np.sort(data.commands.sent_ns)) / 1e6)
    else:
        sent_seq = np.arange(plan.n_ticks(), dtype=np.int64)
        out["expected_from"] = "plan (no host bag)"
        sent_times = {}
    out["commands_sent"] = int(len(sent_seq))
    out["last_seq_sent"] = int(sent_seq.max()) if len(sent_seq) else None
    series = LatencySeries()
    rec = data.receipts
    if rec is None:
        out.update(commands_received=0, lost=None, loss_ratio=None, available=False)
        return Latency(**out), series
    out["available"] = True
    out["arrival_stamp"] = data.record.outcome.lab.get("arrival_stamp") or {}
    out["clock_offset_source"] = data.record.outcome.lab.get("clock_offset_source", "")
    first = _first_arrivals(rec.seq)
    seq = rec.seq[first]
    out["receipts"] = int(len(rec.seq))
    out["duplicates"] = int(len(rec.seq) - len(first))
    out["out_of_order"] = int(np.count_nonzero(rec.seq < np.maximum.accumulate(np.r_[-1, rec.seq[:-1]])))
    out["commands_received"] = int(len(seq))
    out["last_seq_received"] = int(seq.max()) if len(seq) else None
    recorded_seq, out["unrecorded"] = _recorded_range(data, sent_seq, seq)
    lost = np.setdiff1d(recorded_seq, seq)
    out["lost"] = int(len(lost))
    out["loss_ratio"] = float(len(lost) / len(recorded_seq)) if len(recorded_seq) else None
    out["lost_spans"] = spans(lost)[:200]
    out["received_not_sent"] = int(len(np.setdiff1d(seq, sent_seq)))
    if sent_times:
        host_sent = np.array([sent_times.get(s, -1) for s in seq.tolist()], dtype=np.int64)
        mismatch = (host_sent >= 0) & (host_sent != rec.sent_ns[first])
        out["sent_stamp_mismatches"] = int(np.count_nonzero(mismatch))

    # integer stamps subtracted first: as floats, nanoseconds since the epoch are 256 ns apart
    stamped_ns = rec.received_ns[first] - rec.sent_ns[first]
    one_way_s = (stamped_ns + clock.offset_at(rec.received_ns[first]) * 1e9) / 1e9
    out["one_way_ms"] = _stats(one_way_s, 1e3)
    out["lateness"] = lateness_classes(one_way_s[np.isin(seq, sent_seq)], len(lost), plan.tick_s)
    if sent_times:
        overflow = lost_to_history_overflow(lost, seq, one_way_s, sent_times, _depth(data))
        out["lost_to_history_overflow"] = int(len(overflow))
        out["lost_to_history_overflow_spans"] = spans(overflow)[:200]
    stalled = lost_to_reader_stalls(spans(lost), rec.seq, rec.received_ns, rec.taken_ns, _depth(data))
    out["lost_to_reader_stalls"] = sum(hi - lo + 1 for lo, hi in stalled)
    out["lost_to_reader_stalls_spans"] = stalled[:200]
    out["one_way_live_ms"] = _stats(rec.live_latency_s[first], 1e3)
    # consecutive plan ticks only: a lost command's gap is loss, and the stop burst's spacing is
    # the host's choice (seq n_ticks on), not jitter
    by_seq = np.argsort(seq)
    consecutive = (np.diff(seq[by_seq]) == 1) & (seq[by_seq][1:] < plan.n_ticks())
    interarrival_ms = (np.diff(rec.received_ns[first][by_seq]) / 1e6)[consecutive]
    out["interarrival_ms"] = _stats(interarrival_ms)
    out["jitter_ms"] = finite_or_none(np.std(interarrival_ms)) if len(interarrival_ms) else None
    # the same pairs: a lost command's gap is loss, not a variation of delay
    pair_ipdv_s = np.abs(np.diff(one_way_s[by_seq]))[consecutive]
    out["ipdv_ms"] = finite_or_none(np.mean(pair_ipdv_s) * 1e3) if len(pair_ipdv_s) else None
    if data.probes is not None and len(data.probes.t1_ns):
        out["round_trip_ms"] = _stats(data.probes.delay_s, 1e3)
    if clock.method == SHARED_CLOCK:
        out["ntp_estimate"] = ntp_beside_truth(data, clock, rec.received_ns[first], rec.sent_ns[first])
    live_offsets = rec.live_offset_s[first]
    fin = np.isfinite(live_offsets)
    if np.any(fin):
        out["live_offset_error_ms"] = _stats(
            (live_offsets[fin] - clock.offset_at(rec.received_ns[first][fin])) * 1e3
        )

    series.seq = seq
    series.sent_s = (rec.sent_ns[first] - start) / 1e9
    series.one_way_ms = one_way_s * 1e3
    series.live_ms = rec.live_latency_s[first] * 1e3
    lost_times = np.array([sent_times.get(s, start + s * 1e9 / plan.command_rate_hz) for s in lost.tolist()])
    series.lost_sent_s = (lost_times - start) / 1e9 if len(lost) else np.zeros(0)
    series.lost_seq = lost
    out["faults"] = _per_fault(faults, sent_seq, sent_times, lost, series, start, plan.command_rate_hz)
    return Latency(**out), series


def _stats(values: np.ndarray, scale: float = 1.0) -> Stats:
    return Stats.model_validate(perftest_stats(values, scale))


def _depth(data: TrialData) -> int | None:
    return history_depth(data.record.request.transport.qos)


def history_depth(qos_name: str) -> int | None:
    """The history depth a KEEP_LAST hop of this QoS profile holds; None under KEEP_ALL."""
    qos = get_qos(qos_name)
    return qos.depth if qos.history == "keep_last" else None


def lost_to_history_overflow(
    lost: np.ndarray, seq: np.ndarray, one_way_s: np.ndarray, sent_ns: dict[int, int], depth: int | None
) -> np.ndarray:
    """The lost commands a KEEP_LAST history of ``depth`` (a writer's or a reader's on the path) can
    have overwritten. It drops command k only when k+depth enters it before k was taken; the history
    then holds k+1 .. k+depth, taken in order after that, so the first command received after k was
    still on the path when the host sent k+depth: its one-way delay is at least the time between
    its own send and k+depth's. A loss without that hold (a real drop, a fault, a path that was
    late only before k) stays unexplained."""
    if depth is None or len(lost) == 0 or len(seq) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(seq)
    seq_sorted, delay_sorted = seq[order], one_way_s[order]
    explained = []
    for k in lost.tolist():
        overwriter = sent_ns.get(k + depth)
        after = int(np.searchsorted(seq_sorted, k, side="right"))
        if overwriter is None or after == len(seq_sorted):
            continue
        first_after, held_s = int(seq_sorted[after]), delay_sorted[after]
        if (
            first_after in sent_ns
            and np.isfinite(held_s)
            and held_s * 1e9 >= overwriter - sent_ns[first_after]
        ):
            explained.append(k)
    return np.asarray(explained, dtype=np.int64)


def ntp_beside_truth(
    data: TrialData, truth: ClockModel, received_ns: np.ndarray, sent_ns: np.ndarray
) -> NtpEstimate:
    """What the NTP-style estimate (all the lab has) makes of this trial, against the shared clock.

    ``offset_error_ms``: estimate minus true offset at each received command, which is the error of
    each one-way figure; ``median_error_ms``: the estimate's one-way median minus the true one. A
    probe's offset is off by half the difference of its two legs, so on a path whose directions
    differ the estimate is off by about half the asymmetry (``path_asymmetry``, from the median
    one-way delays measured before the trial), and by more where jitter makes the probes it rests
    on more lopsided."""
    ntp = estimate_ntp_clock(data)
    section = NtpEstimate(
        clock=ntp.as_section(),
        available=ntp.method != "none",
        path_asymmetry=path_asymmetry(data.record.outcome.link),
    )
    if not section.available:
        return section
    true_s = (truth.to_host_ns(received_ns) - sent_ns.astype(float)) / 1e9
    ntp_s = (ntp.to_host_ns(received_ns) - sent_ns.astype(float)) / 1e9
    one_way = _stats(ntp_s, 1e3)
    true_median, ntp_median = _stats(true_s, 1e3).median, one_way.median
    return section.model_copy(
        update={
            "one_way_ms": one_way,
            "offset_error_ms": _stats(ntp_s - true_s, 1e3),
            "median_error_ms": None
            if true_median is None or ntp_median is None
            else ntp_median - true_median,
        }
    )


def path_asymmetry(link: dict[str, Any]) -> PathAsymmetry | None:
    """Host-to-robot minus robot-to-host median one-way delay of the link measured before the trial
    (shared clock), and what it does to an NTP-style offset: half its size. None without them."""
    forward, back = link.get("owd_ab_median_ms"), link.get("owd_ba_median_ms")
    if (link.get("from"), link.get("to")) != ("host", "robot") or forward is None or back is None:
        return None
    if not (np.isfinite(forward) and np.isfinite(back)):
        return None
    asymmetry = float(forward) - float(back)
    return PathAsymmetry(
        host_to_robot_ms=float(forward),
        robot_to_host_ms=float(back),
        asymmetry_ms=asymmetry,
        ntp_error_bound_ms=abs(asymmetry) / 2,
    )


def _recorded_range(data: TrialData, sent_seq: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, int]:
    """The commands whose fate the robot's recording can tell, and how many it cannot. A robot
    logger that died mid-trial (``outcome.lab.robot_recording: cut``, its bag repaired up to the
    cut) wrote its receipts in order, so what it heard is known up to its last written receipt;
    commands sent after that may have arrived unlogged: unrecorded, not lost on the link."""
    if data.record.outcome.lab.get("robot_recording") != "cut" or not len(seq):
        return sent_seq, 0
    recorded = sent_seq[sent_seq <= seq.max()]
    return recorded, int(len(sent_seq) - len(recorded))


def _first_arrivals(seq: np.ndarray) -> np.ndarray:
    """Indices of the first receipt of each sequence number, in arrival order."""
    _, first = np.unique(seq, return_index=True)
    return np.sort(first)


def _per_fault(
    faults: list[Fault],
    sent_seq: np.ndarray,
    sent_times: dict[int, int],
    lost: np.ndarray,
    series: LatencySeries,
    start: int,
    rate_hz: float,
) -> list[FaultLatency]:
    """Commands sent, lost and the worst latency inside each fault span."""
    if not faults:
        return []
    times = np.array([sent_times.get(s, start + s * 1e9 / rate_hz) for s in sent_seq.tolist()])
    sent_s = (times - start) / 1e9
    lost_set = np.isin(sent_seq, lost)
    out = []
    for fault in faults:
        lo, hi = fault.start_s, fault.start_s + fault.duration_s
        inside = (sent_s >= lo) & (sent_s < hi)
        rx = (series.sent_s >= lo) & (series.sent_s < hi)
        worst = np.nanmax(series.one_way_ms[rx]) if np.any(rx) else None
        out.append(
            FaultLatency(
                start_s=lo,
                duration_s=fault.duration_s,
                commands_sent=int(np.count_nonzero(inside)),
                commands_lost=int(np.count_nonzero(inside & lost_set)),
                max_one_way_ms=finite_or_none(worst),
            )
        )
    return out
