"""The docs' generated blocks: tables rendered from the reference summaries in ``reference/``.

A block in a Markdown file::

    <!-- generated: perf-overhead -->
    ...rendered from reference/bench-perf.json...
    <!-- end: perf-overhead -->

``tools/render_docs.py`` fills every block from its summary; ``problems`` says where a block no
longer matches its data, and where the section around a block quotes one of the block's figures
(or repeats its table) outside it, so a figure cannot be transcribed by hand beside its source.
The benchmark scripts print the same tables from the rows they just measured.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fieldtest.analysis import ALPHA, POWER, differ, pooled_sd, repetitions_needed, smallest_difference
from fieldtest.record.reference import (
    REFERENCE_DIR,
    AnalysisSpeedRow,
    AnalysisSpeedSummary,
    AnySummary,
    ChenSweepRow,
    ChenSweepSummary,
    Conditions,
    ForwarderCostRow,
    ForwarderCostSummary,
    ForwardingRow,
    ForwardingSummary,
    LabLatencyRow,
    LabLatencySummary,
    NewcomerRow,
    NewcomerSummary,
    PerfOverheadRow,
    PerfOverheadSummary,
    PredictCaseRow,
    PredictSummary,
    ReferenceFormatError,
    RelayStepRow,
    RelayStepsSummary,
    ReproductionRow,
    ReproductionSummary,
    RobotTrafficRow,
    RobotTrafficSummary,
    SecurityCostRow,
    SecurityCostSummary,
    TwinTrialRow,
    TwinTrialsSummary,
    VpnCompareRow,
    VpnCompareSummary,
    Wifi80211Row,
    Wifi80211Summary,
    WirelessFindingsRow,
    WirelessFindingsSummary,
    ZenohBridgeRow,
    ZenohBridgeSummary,
    read_reference,
)

# The files that may hold generated blocks, from the repository's root.
DOC_FILES = ("README.md", "docs/*.md", "benchmarks/README.md")

_BLOCK = re.compile(
    r"<!-- generated: (?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- end: (?P=name) -->", re.DOTALL
)
_OPEN = re.compile(r"<!-- (?:generated|end): [a-z0-9-]+ -->")
_RULE = re.compile(r"\|(?: ?:?-+:? ?\|)+")  # a table's rule under its header
# A quoted figure: a decimal number of three digits or more (0.24, 16.7), not a threshold like 1.5.
_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")
_STANDARD = re.compile(r"802\.11\w*")  # the standard's name, not a figure
# code (spans, indented or fenced blocks) holds commands and their defaults, not quoted results
_CODE = re.compile(r"^```(?s:.*?)^```|`[^`\n]*`|^(?: {4}|\t).*$", re.M)


def _is_figure(text: str) -> bool:
    return sum(c.isdigit() for c in text) >= 3


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _source_line(summary: AnySummary, path: str) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in sorted(summary.versions.items()) if k != "platform")
    return (
        f"Data: `{path}` ({summary.measured_utc}, {summary.machine}; {versions}). "
        f"Reproduce: `{summary.command}`."
    )


# --- bench_perf.py: fieldtest perf against the native tools -----------------------------------------


def perf_target(size_b: int) -> float:
    """The allowed perf/native median round-trip ratio at ``size_b`` bytes."""
    return 1.5 if size_b <= 64 * 1024 else 2.0


def _ratio(perf: float | None, native: float | None) -> float | None:
    return None if perf is None or not native else perf / native


def perf_met(row: PerfOverheadRow) -> bool | None:
    ratio = _ratio(row.perf_rtt_p50_ms, row.native_rtt_p50_ms)
    return None if row.error or ratio is None else ratio <= perf_target(row.size_b)


def perf_overhead_table(rows: list[PerfOverheadRow]) -> list[str]:
    native_name = {"dds": "ddsperf", "fastdds": "fastdds ping", "zenoh": "zenoh ping"}
    lines = [
        "| tool | message | native RTT mean / p50 ms | perf RTT mean / p50 ms | RTT ratio mean / p50 | "
        "target | throughput ratio | conditions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {native_name[r.tool]} | {r.message} | FAILED: {r.error} | | | | | |")
            continue
        met = "met" if perf_met(r) else "MISSED"
        lines.append(
            f"| {native_name[r.tool]} | {r.message} | {_fmt(r.native_rtt_mean_ms)} / {_fmt(r.native_rtt_p50_ms)} | "
            f"{_fmt(r.perf_rtt_mean_ms)} / {_fmt(r.perf_rtt_p50_ms)} | "
            f"{_fmt(_ratio(r.perf_rtt_mean_ms, r.native_rtt_mean_ms))} / "
            f"{_fmt(_ratio(r.perf_rtt_p50_ms, r.native_rtt_p50_ms))} | <= {perf_target(r.size_b):g} {met} | "
            f"{_fmt(r.throughput_ratio, 3)} | {r.conditions.text() if r.conditions else ''} |"
        )
    return lines


def perf_stages_table(rows: list[PerfOverheadRow]) -> list[str]:
    """Where perf's round trip goes: out, the relay's hand-off and echo, back (the rest), means."""
    lines = [
        "| row | round trip | out | relay hand-off | relay echo | back | native round trip |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.error or r.perf_rtt_mean_ms is None or not r.stages_ms:
            continue
        s = r.stages_ms
        back = r.perf_rtt_mean_ms - s["out"] - s["decode"] - s["echo"]
        lines.append(
            f"| {r.tool} {r.message} | {r.perf_rtt_mean_ms:.2f} | {s['out']:.2f} | {s['decode']:.2f} | "
            f"{s['echo']:.2f} | {back:.2f} | {_fmt(r.native_rtt_mean_ms)} |"
        )
    return lines


def _missed_by(row: PerfOverheadRow) -> str:
    """A missed size, with its median ratio beside the target and how far over it that is."""
    ratio, target = _ratio(row.perf_rtt_p50_ms, row.native_rtt_p50_ms) or 0.0, perf_target(row.size_b)
    return f"{row.tool} {row.message} ({ratio:.2f}x against {target:g}x, {100 * (ratio / target - 1):.0f} % over)"


def perf_verdict(rows: list[PerfOverheadRow]) -> str:
    """How many sizes met the round-trip target, and by how much each of the others missed it."""
    judged = [r for r in rows if perf_met(r) is not None]
    missed = [_missed_by(r) for r in judged if not perf_met(r)]
    failed = [f"{r.tool} {r.message}" for r in rows if r.error]
    text = f"Target met at {len(judged) - len(missed)} of {len(rows)} sizes"
    text += f"; missed at {', '.join(missed)}" if missed else ""
    text += f"; failed: {', '.join(failed)}" if failed else ""
    return text + "."


def _perf_overhead(summary: PerfOverheadSummary, path: str) -> list[str]:
    return [
        *perf_overhead_table(summary.rows),
        "",
        "Where perf's round trip goes (means, ms; out = ping send stamp to the relay's arrival stamp, relay "
        "hand-off = arrival stamp to the relay's callback holding the ping's bytes, relay echo = from there "
        "to the echo's send stamp, back = the rest):",
        "",
        *perf_stages_table(summary.rows),
        "",
        perf_verdict(summary.rows),
        _source_line(summary, path),
    ]


# --- bench_wifi80211.py: the 802.11 link against its configuration ----------------------------------


def _by_size(values: dict[int, float], digits: int = 2, scale: float = 1.0) -> str:
    return " / ".join(f"{scale * values[s]:.{digits}f}" for s in sorted(values))


def _span(values: list[float], digits: int, unit: str = "") -> str:
    lo, hi = min(values), max(values)
    same = f"{lo:.{digits}f}" == f"{hi:.{digits}f}"
    return f"{lo:.{digits}f}{unit}" if same else f"{lo:.{digits}f}-{hi:.{digits}f}{unit}"


def wifi80211_table(rows: list[Wifi80211Row]) -> list[str]:
    others = any(r.others_airtime_share is not None for r in rows)  # a column only where there are others
    lines = [
        "| profile | unicast RTT p50, 64 / 512 / 1400 B (ms) | RTT p99 (ms) | unicast loss | "
        "multicast delivered, 100 / 1400 / 4000 B | retries per unicast frame (rates) | "
        "group frames: rate, retries, airtime | "
        + ("other stations' airtime | " if others else "")
        + "link CPU (% of a core) | lag p99 / max (ms) | conditions |",
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if others else ""),
    ]
    for r in rows:
        retries = group = lag = ""
        if r.unicast_retries_per_frame is not None:
            retries = f"{r.unicast_retries_per_frame:.2f} ({', '.join(r.unicast_rates)})"
        if r.group_retries_per_frame is not None and r.group_airtime_share is not None:
            group = f"{', '.join(r.group_rates)}; {r.group_retries_per_frame:.2f}, {100 * r.group_airtime_share:.1f} %"
        if r.lag_p99_ms is not None and r.lag_max_ms is not None:
            lag = f"{r.lag_p99_ms:.2f} / {r.lag_max_ms:.1f}"
            if r.lag_bound_ms is not None and r.lag_p99_ms > r.lag_bound_ms:
                lag += f" (behind real time: p99 over the {r.lag_bound_ms:g} ms bound)"
        lines.append(
            f"| `{r.profile}` ({r.configuration}) | {_by_size(r.rtt_p50_ms)} | "
            f"{_span(list(r.rtt_p99_ms.values()), 1)} | {_span([100 * v for v in r.unicast_loss.values()], 1, ' %')} | "
            f"{_by_size(r.multicast_delivered, 1, 100.0)} % | {retries} | {group} | "
            + (
                f"{100 * r.others_airtime_share:.1f} % | "
                if r.others_airtime_share is not None
                else "| "
                if others
                else ""
            )
            + f"{r.link_cpu_percent:.0f} | "
            f"{lag} | {r.conditions.text()} |"
        )
    return lines


def _wifi80211_link(summary: Wifi80211Summary, path: str) -> list[str]:
    return [*wifi80211_table(summary.rows), "", _source_line(summary, path)]


# --- bench_zenoh_bridge.py: what the two Zenoh bridges add ------------------------------------------


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}"


def zenoh_bridge_table(rows: list[ZenohBridgeRow]) -> list[str]:
    lines = [
        "| path | received / sent | min (ms) | p50 | p90 | p99 | added over DDS, min / p50 | "
        "bridges + router CPU (% of a core) | conditions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        added = "" if r.added_min_ms is None else f"{_signed(r.added_min_ms)} / {_signed(r.added_p50_ms)}"
        cpu = f"{r.bridge_cpu_percent:.1f}" if r.path.endswith("bridged") else ""
        lines.append(
            f"| {r.path} | {r.received} / {r.sent} | {r.min_ms:.3f} | {r.p50_ms:.3f} | {r.p90_ms:.2f} | "
            f"{r.p99_ms:.1f} | {added} | {cpu} | {r.conditions.text()} |"
        )
    return lines


def _zenoh_bridge(summary: ZenohBridgeSummary, path: str) -> list[str]:
    return [*zenoh_bridge_table(summary.rows), "", _source_line(summary, path)]


# --- bench_twin.py part 4: lap drift on loopback -----------------------------------------------------


def twin_drift_table(rows: list[TwinTrialRow]) -> list[str]:
    lines = [
        "| middleware | lap drift (mm) | stack check | received / sent | one-way p50 / p99 (ms) | conditions |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.middleware} | {r.end_reason}: {r.error} | | | | {r.conditions.text()} |")
            continue
        check = {True: "valid", False: "invalid: " + "; ".join(r.invalid_reasons), None: "-"}[r.valid]
        lines.append(
            f"| {r.middleware} | {_fmt(r.drift_mm)} | {check} | {r.received} / {r.sent} | "
            f"{_fmt(r.latency_p50_ms)} / {_fmt(r.latency_p99_ms)} | {r.conditions.text()} |"
        )
    return lines


def _twin_drift(summary: TwinTrialsSummary, path: str) -> list[str]:
    plans = ", ".join(sorted({r.plan for r in summary.rows}))
    at_once = summary.settings.get("trials_at_once", len(summary.rows))
    head = f"Plan: {plans}; {at_once} trials at a time. "
    return [*twin_drift_table(summary.rows), "", head + _source_line(summary, path)]


# --- bench_netem.py: the userspace forwarder's own cost ---------------------------------------------


def _per_direction(values: list[int]) -> str:
    return " / ".join(str(v) for v in values)


def forwarder_cost_table(rows: list[ForwarderCostRow]) -> list[str]:
    lines = [
        "| path | offered (packets/s) | RTT p50 / p99 (ms) | configured RTT (ms) | forwarder CPU (% of a core) | "
        "forwarder lateness p50 / p99 / max, each way (us) | delivered | conditions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rtt = "" if r.rtt_p50_ms is None else f"{r.rtt_p50_ms:.3f} / {_fmt(r.rtt_p99_ms, 3)}"
        late = (
            f"{_per_direction(r.late_p50_us)}; {_per_direction(r.late_p99_us)}; {_per_direction(r.late_max_us)}"
            if r.late_p50_us
            else ""
        )
        cpu = "" if r.forwarder_cpu_percent is None else f"{r.forwarder_cpu_percent:.1f}"
        delivered = "" if r.delivered is None else f"{100 * r.delivered:.1f} %"
        configured = "" if r.configured_rtt_ms is None else f"{r.configured_rtt_ms:g}"
        lines.append(
            f"| {r.path} | {r.packets_per_s:.0f} | {rtt} | {configured} | {cpu} | {late} | {delivered} | "
            f"{r.conditions.text()} |"
        )
    return lines


def _forwarder_cost(summary: ForwarderCostSummary, path: str) -> list[str]:
    return [*forwarder_cost_table(summary.rows), "", _source_line(summary, path)]


# --- bench_security.py: what each security setting costs -------------------------------------------


def _cpu(row: SecurityCostRow, role: str) -> str:
    value = row.cpu_percent.get(role)
    return "-" if value is None else f"{value:.1f}"


def security_cost_table(rows: list[SecurityCostRow]) -> list[str]:
    lines = [
        "| middleware | security | latency p50 (ms) | p99 (ms) | p50 vs none | CPU robot % | CPU host % "
        "| CPU router/broker % | received / sent | p50 of each pass (ms) | offset-corrected p50 (ms) | conditions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    baselines = {r.middleware: r for r in rows if r.security == "none"}
    for r in rows:
        if r.p50_ms is None:
            lines.append(
                f"| {r.middleware} | {r.security} | FAILED: {'; '.join(r.errors)} | | | | | | | | | "
                f"{r.conditions.text()} |"
            )
            continue
        base = baselines.get(r.middleware)
        delta = ""
        if base is not None and base is not r and base.p50_ms:
            delta = (
                f"{100 * (r.p50_ms - base.p50_ms) / base.p50_ms:+.0f} % ({r.p50_ms - base.p50_ms:+.3f} ms)"
            )
        infra = _cpu(r, "router" if "router" in r.cpu_percent else "broker")  # whichever the row ran
        lines.append(
            f"| {r.middleware} | {r.security} | {r.p50_ms:.3f} | {_fmt(r.p99_ms, 3)} | {delta} | {_cpu(r, 'robot')} "
            f"| {_cpu(r, 'host')} | {infra} | {r.received} / {r.sent} | {', '.join(f'{v:.2f}' for v in r.run_p50_ms)} "
            f"| {_fmt(r.offset_corrected_p50_ms, 3)} | {r.conditions.text()} |"
        )
    return lines


def _listed(value: object) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _security_cost(summary: SecurityCostSummary, path: str) -> list[str]:
    s = summary.settings
    head = (
        f"Middlewares run: {_listed(s.get('middlewares'))}. Plan: {s.get('plan', '?')}; "
        f"QoS {s.get('qos', '?')}; {s.get('passes', '?')} pass(es), the settings' order rotated each pass; "
        "loopback, one trial at a time. "
    )
    note = saturated_note([r.conditions for r in summary.rows])
    return [*security_cost_table(summary.rows), "", head + note + _source_line(summary, path)]


# --- bench_robot_traffic.py: the robot's own traffic and the commands --------------------------------

PREVIEW_TOPIC = "/oakd/rgb/preview/image_raw"  # fieldtest.robottraffic's camera preview


def case_preset(case: str) -> str:
    """The robot traffic preset a bench case names after its middleware (``dds+rviz``: rviz;
    ``zenoh-peer+rviz+express``: rviz; ``dds``: none)."""
    return next((flag for flag in case.split("+")[1:] if flag != "express"), "none")


def _preset_topics(case: str) -> tuple[str, ...]:
    from fieldtest.robottraffic import PRESETS

    return PRESETS[case_preset(case)]


def robot_traffic_table(rows: list[RobotTrafficRow]) -> list[str]:
    lines = [
        "| case | repetition | one-way median / p90 / p99 (ms) | commands lost / sent | lap drift (mm) | "
        "preview received (Hz, of 30) | DDS discovery packets | stack check | conditions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.end_reason != "completed":
            lines.append(
                f"| {r.case} | {r.repetition} | {r.end_reason}: {r.detail} | | | | | | {r.conditions.text()} |"
            )
            continue
        check = {True: "valid", False: "invalid", None: "-"}[r.valid]
        preview = _fmt(r.preview_received_hz, 1) if PREVIEW_TOPIC in _preset_topics(r.case) else ""
        lines.append(
            f"| {r.case} | {r.repetition} | {_fmt(r.median_ms)} / {_fmt(r.p90_ms, 1)} / {_fmt(r.p99_ms, 1)} | "
            f"{'-' if r.lost is None else r.lost} / {'-' if r.sent is None else r.sent} | {_fmt(r.drift_mm, 1)} | "
            f"{preview} | {'-' if r.discovery_packets is None else r.discovery_packets} | {check} | "
            f"{r.conditions.text()} |"
        )
    return lines


def _topics_received(r: RobotTrafficRow) -> str:
    """Each preset topic's rate over the host's arrivals beside its upstream rate, and its messages
    received of those sent (a rate over a few arrivals alone would hide a topic that hardly
    arrives): ``/scan 5.5 of 5.5 Hz, 184 of 201``."""
    from fieldtest.robottraffic import TOPICS

    def count(topic: str) -> str:
        received, sent = r.topics_received.get(topic), r.topics_sent.get(topic)
        return "" if received is None or sent is None else f", {received} of {sent}"

    return ", ".join(
        f"{topic} {_fmt(r.topics_received_hz.get(topic), 1)} of {TOPICS[topic].rate_hz:g} Hz{count(topic)}"
        for topic in _preset_topics(r.case)
    )


def _airtime(shares: dict[str, float]) -> str:
    """Each transmitter's airtime as a share of the run: the access point, the trial's stations, the others."""
    order = ("ap", "host", "robot", "others")
    names = sorted(shares, key=lambda n: (order.index(n) if n in order else len(order), n))
    return ", ".join(f"{n} {100 * shares[n]:.1f} %" for n in names)


def robot_traffic_80211_table(rows: list[RobotTrafficRow]) -> list[str]:
    """The ns-3 802.11 link's side of each trial (rows of other links left out; none: no table)."""
    lines = [
        "| case | repetition | preset topics received: rate over the arrivals, messages of those sent | "
        "airtime, share of the run | "
        "unicast retries per frame | AP group frames/s | group frames held to a DTIM | "
        "host / robot share of the run dozing | ns-3 CPU (% of a core) | ns-3 lag p99 / max (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.lag_p99_ms is None and not r.airtime_share:
            continue
        lines.append(
            f"| {r.case} | {r.repetition} | {_topics_received(r)} | {_airtime(r.airtime_share)} | "
            f"{_fmt(r.unicast_retries_per_frame, 3)} | {_fmt(r.group_per_s)} | {_fmt(r.group_frames_held, 0)} | "
            f"{_per_station(r.doze_share, 1, 100.0, ' %') if r.doze_share else '-'} | "
            f"{_fmt(r.link_cpu_percent, 0)} | {_fmt(r.lag_p99_ms)} / {_fmt(r.lag_max_ms, 1)} |"
        )
    return lines if len(lines) > 2 else []


def robot_traffic_set_aside(rows: list[RobotTrafficRow]) -> list[str]:
    """Why the stack check set trials aside (nothing when it set none aside)."""
    reasons = [f"{r.case} {r.repetition}: {' | '.join(r.invalid_reasons)}" for r in rows if r.invalid_reasons]
    return [f"Set aside by the stack check: {'; '.join(reasons)}.", ""] if reasons else []


def _robot_traffic(summary: RobotTrafficSummary, path: str) -> list[str]:
    s = summary.settings
    head = (
        f"Network `{s.get('network', '?')}`, quick plan, {s.get('repetitions', '?')} repetition(s), one trial "
        "at a time, the cases interleaved; a case names the preset it adds after its middleware. "
    )
    note = saturated_note([r.conditions for r in summary.rows])
    link = robot_traffic_80211_table(summary.rows)
    return [
        *robot_traffic_table(summary.rows),
        "",
        *robot_traffic_set_aside(summary.rows),
        *(link + [""] if link else []),
        head + note + _source_line(summary, path),
    ]


# --- bench_analysis.py: the analysis' speed beside evo_ape -------------------------------------------

_SINGLE = (
    ("analyze", "wall_s", "`fieldtest analyze` (new process, plots + report)"),
    ("analyze", "cpu_s", "its CPU time"),
    ("analyze-no-plots", "wall_s", "`fieldtest analyze --no-plots` (new process)"),
    ("analyze-warm", "wall_s", "`analyze_trial` in a warm process (plots + report)"),
    ("evo-ape", "wall_s", "one `evo_ape` run on the same poses"),
    ("evo-ape", "cpu_s", "its CPU time"),
)
_COMPARE = {
    "compare-process": "`fieldtest compare --no-page` (new process; every trial already analyzed)",
    "compare-cached": "`compare_trials` in this process (every trial already analyzed; campaign page included)",
    "compare-scratch": "`compare_trials` from scratch (analyzes every trial without plots; campaign page included)",
}


def _columns(rows: list[AnalysisSpeedRow]) -> list[tuple[float, bool]]:
    return sorted({(r.rate_hz, r.busy_core) for r in rows if r.rate_hz is not None})


def _column_name(rate: float, busy: bool) -> str:
    return f"{rate:g} Hz" + (", a core busy" if busy else "")


def analysis_over_evo(rows: list[AnalysisSpeedRow], rate: float, busy: bool) -> float | None:
    found = {r.measure: r for r in rows if r.rate_hz == rate and r.busy_core == busy}
    if "analyze" not in found or "evo-ape" not in found:
        return None
    return found["analyze"].wall_s / found["evo-ape"].wall_s


def analysis_speed_lines(rows: list[AnalysisSpeedRow]) -> list[str]:
    columns = _columns(rows)
    cell = {(r.measure, r.rate_hz, r.busy_core): r for r in rows}
    lines = [
        "| | " + " | ".join(_column_name(*c) for c in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for measure, field, label in _SINGLE:
        values = [getattr(cell[key], field) if (key := (measure, *c)) in cell else None for c in columns]
        lines.append(f"| {label} | " + " | ".join("-" if v is None else f"{v:.2f} s" for v in values) + " |")
    ratios = [analysis_over_evo(rows, *c) for c in columns]
    lines.append("| whole analysis / `evo_ape` | " + " | ".join(f"{_fmt(x)}x" for x in ratios) + " |")
    conditions = [cell[key].conditions.text() if (key := ("analyze", *c)) in cell else "" for c in columns]
    lines.append("| conditions (the `fieldtest analyze` runs) | " + " | ".join(conditions) + " |")
    met = [_column_name(*c) for c, x in zip(columns, ratios, strict=True) if x is not None and x < 1]
    missed = [_column_name(*c) for c, x in zip(columns, ratios, strict=True) if x is not None and x >= 1]
    verdict = "Target (a fresh analysis, plots included, faster than one `evo_ape` run): "
    verdict += (
        f"met at {'; '.join(met) or 'none'}" + (f"; missed at {'; '.join(missed)}" if missed else "") + "."
    )
    compare = [r for r in rows if r.measure in _COMPARE]
    lines += [
        "",
        verdict,
        "",
        "| compare | trials | wall time | CPU time | conditions |",
        "|---|---|---|---|---|",
    ]
    for r in compare:
        lines.append(
            f"| {_COMPARE[r.measure]} | {r.trials} | {r.wall_s:.2f} s | "
            f"{'-' if r.cpu_s is None else f'{r.cpu_s:.2f} s'} | {r.conditions.text()} |"
        )
    within = [f"{_COMPARE[r.measure].split(' (')[0]} {'met' if r.wall_s < 20 else 'MISSED'}" for r in compare]
    lines += ["", f"Target (the trials compared in under 20 s): {'; '.join(within)}."]
    return lines


def saturated_note(conditions: list[Conditions]) -> str:
    """A sentence when every core was nearly always busy in some row: the figures are that load's."""
    busy = [c for c in conditions if c.busy_percent and min(c.busy_percent) >= 90]
    if not busy:
        return ""
    return (
        f"In {len(busy)} of {len(conditions)} rows every core was at least 90 % busy (other work on the "
        "machine: see the conditions), so those figures are this machine's under that load, noisy and "
        "slower than on a free machine. "
    )


def _analysis_speed(summary: AnalysisSpeedSummary, path: str) -> list[str]:
    best = summary.settings.get("best_of", "?")
    head = f"Each single-trial figure is the best of {best} runs of a 96 s synthetic trial (the wall time, and the CPU time of that run). "
    note = saturated_note([r.conditions for r in summary.rows])
    return [*analysis_speed_lines(summary.rows), "", head + note + _source_line(summary, path)]


# --- bench_forwarding.py: the router's or broker's own forwarding delay -----------------------------


def forwarding_table(rows: list[ForwardingRow]) -> list[str]:
    lines = [
        "| middleware | repetition | round trip p50 / p99 / max (ms) | samples | lap drift (mm) | real time | conditions |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.end_reason != "completed":
            lines.append(
                f"| {r.middleware} | {r.repetition} | {r.end_reason}: {r.detail} | | | | {r.conditions.text()} |"
            )
            continue
        realtime = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in sorted(r.realtime.items())) or "-"
        lines.append(
            f"| {r.middleware} | {r.repetition} | {_fmt(r.rtt_p50_ms)} / {_fmt(r.rtt_p99_ms)} / {_fmt(r.rtt_max_ms)} | "
            f"{r.samples} | {_fmt(r.drift_mm)} | {realtime} | {r.conditions.text()} |"
        )
    return lines


def _forwarding(summary: ForwardingSummary, path: str) -> list[str]:
    return [*forwarding_table(summary.rows), "", _source_line(summary, path)]


# --- bench_reproduction.py: the seed findings beside the kit ---------------------------------------


def interval_text(mean: float, low: float, high: float, n: int, digits: int = 2, unit: str = "") -> str:
    """A mean over ``n`` repetitions with its 95 % interval, as the reproduction table shows it."""
    m, lo, hi = (round(v, digits) for v in (mean, low, high))
    if n < 2:
        return f"{m:.{digits}f}{unit} (n=1)"
    return f"{m:.{digits}f}{unit} [{lo:.{digits}f}, {hi:.{digits}f}] (n={n})"


def _kit_figure(row: ReproductionRow) -> str:
    if row.kit_mean is None or row.kit_low is None or row.kit_high is None:
        return "no figure"
    return interval_text(row.kit_mean, row.kit_low, row.kit_high, row.repetitions, row.digits, row.unit)


def reproduction_table(rows: list[ReproductionRow]) -> list[str]:
    lines = [
        "| finding | seed (source) | seed figure | kit figure, 95 % interval | direction seed / kit | "
        "reproduced | rows behind it | conditions | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        vendor = f" (kit: {r.kit_middleware})" if r.kit_middleware else ""
        lines.append(
            f"| {r.key} {r.claim}{vendor} | {r.study}, {r.source} | {r.seed_figure} | {_kit_figure(r)} | "
            f"{r.seed_direction} / {r.kit_direction or '-'} | {r.verdict or ('yes' if r.reproduced else 'no')} | "
            f"{r.rows_behind} | {r.conditions} | {r.notes} |"
        )
    return lines


def reproduction_counts(rows: list[ReproductionRow]) -> str:
    """How many findings the kit reproduced, computed from the rows, by study; findings not
    measurable here or not run yet are named apart and not counted."""
    judged = [r for r in rows if not r.verdict]
    studies = list(dict.fromkeys(r.study for r in judged))
    per_study = ", ".join(
        f"{study} {sum(r.reproduced for r in judged if r.study == study)} of "
        f"{sum(r.study == study for r in judged)}"
        for study in studies
    )
    reproduced = [r.key for r in judged if r.reproduced]
    no_figure = [r.key for r in judged if r.kit_mean is None]
    apart = [
        f" {label}: {', '.join(keys)}."
        for label, keys in (
            ("Not measurable here", [r.key for r in rows if r.verdict.startswith("not measurable")]),
            ("Not run yet", [r.key for r in rows if r.verdict == "not run"]),
        )
        if keys
    ]
    return (
        f"Reproduced: {len(reproduced)} of {len(judged)} findings ({per_study}): {', '.join(reproduced) or 'none'}. "
        f"Without a kit figure: {', '.join(no_figure) or 'none'}." + "".join(apart)
    )


def with_pending_findings(
    rows: list[ReproductionRow], pending: list[ReproductionRow]
) -> list[ReproductionRow]:
    """The measured rows, and in their place in ``pending``'s order (every finding the script
    defines, without data) the findings the measurement has no row for yet."""
    measured = {r.key: r for r in rows}
    merged = [measured.get(p.key, p) for p in pending]
    return merged + [r for r in rows if r.key not in {p.key for p in pending}]


REPRODUCTION_SCRIPT = "benchmarks/bench_reproduction.py"


def script_findings(root: Path) -> list[ReproductionRow]:
    """Every finding of benchmarks/bench_reproduction.py as a row without data: "not run", or
    "not measurable here" with its reason."""
    import importlib.util
    import sys

    path = root / REPRODUCTION_SCRIPT
    spec = importlib.util.spec_from_file_location("bench_reproduction_findings", path)
    if spec is None or spec.loader is None:
        raise ReferenceFormatError(f"{path}: cannot load the findings")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return [module.finding_row(f, {}) for f in module.FINDINGS]


def _reproduction(summary: ReproductionSummary, path: str, root: Path) -> list[str]:
    settings = summary.settings
    when = f"{settings['started']} to {settings['ended']}" if settings.get("ended") else settings["started"]
    rows = with_pending_findings(summary.rows, script_findings(root))
    out = [
        *reproduction_table(rows),
        "",
        f"{settings['reps']} repetitions of every row at {settings['rate']}, {settings['duration_s']:g} s per "
        f"row, run {when}. {reproduction_counts(rows)}",
    ]
    for key in ("order_line", "missing_line", "invalid_line"):
        if settings.get(key):
            out += ["", str(settings[key])]
    return [*out, "", _source_line(summary, path)]


def _reproduction_counts(summary: ReproductionSummary, path: str, root: Path) -> list[str]:
    """The reproduction table's counts alone, for the pages that discuss the seeds' findings."""
    rows = with_pending_findings(summary.rows, script_findings(root))
    return [
        f"Of the seed studies' findings the kit sets its own figures beside (every finding with its "
        f'figures, rows and reasons: docs/benchmarks.md, "The seed findings beside the kit"): '
        f"{reproduction_counts(rows)}",
        "",
        _source_line(summary, path),
    ]


# --- bench_newcomer.py: `make demo` from nothing ----------------------------------------------------


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


def newcomer_table(rows: list[NewcomerRow]) -> list[str]:
    lines = [
        "| run | install done (min) | first trial starts (min) | verdict (min) | verdict | trials kept / "
        "invalid | re-runs | conditions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = (
            r.verdict if not r.exit_code else f"{r.verdict} (exit {r.exit_code}: {' / '.join(r.last_lines)})"
        )
        lines.append(
            f"| {r.repetition} | {_minutes(r.install_s)} | {_minutes(r.first_trial_s)} | {_minutes(r.verdict_s)} "
            f"| {verdict} | {r.trials} / {r.invalid} | {r.reruns} | {r.conditions.text()} |"
        )
    return lines


def _newcomer(summary: NewcomerSummary, path: str) -> list[str]:
    return [*newcomer_table(summary.rows), "", _source_line(summary, path)]


# --- bench_chen_sweep.py: Chen's radio, loss against distance ---------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def chen_sweep_table(rows: list[ChenSweepRow]) -> list[str]:
    lines = [
        "| distance (m) | QoS | security | loss one way / round trip | round trip p50 / p99 (ms) | "
        "ns-3 unicast frames, retries per frame, MAC drops | RTPS packets on the robot link | lag p99 (ms) | valid | conditions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.distance_m, r.security, r.qos)):
        head = f"| {r.distance_m:.2f} | {r.qos} | {r.security} |"
        if r.status != "ok":
            lines.append(f"{head} {r.status}: {r.error} | | | | | - | {r.conditions.text()} |")
            continue
        rtps = ", ".join(f"{k} {n}" for k, n in sorted(r.rtps_packets.items()) if n) or "-"
        valid = "yes" if r.valid else f"no: {'; '.join(r.invalid_reasons)}" if r.valid is False else "-"
        lines.append(
            f"{head} {_pct(r.one_way_loss)} / {_pct(r.round_trip_loss)} | "
            f"{_fmt(r.round_trip_p50_ms)} / {_fmt(r.round_trip_p99_ms)} | {r.unicast_frames}, "
            f"{_fmt(r.retries_per_frame)}, {r.mac_drops} | {rtps} | {_fmt(r.lag_p99_ms)} | {valid} | "
            f"{r.conditions.text()} |"
        )
    return lines


def chen_crossover(rows: list[ChenSweepRow], security: str) -> str:
    """Where Default's one-way loss first exceeds Sensor's (Chen: near 25.7 m), from the counted rows."""
    loss: dict[tuple[float, str], float] = {
        (r.distance_m, r.qos): r.one_way_loss
        for r in rows
        if r.security == security and r.status == "ok" and r.valid is not False and r.one_way_loss is not None
    }
    both = sorted(d for d, q in loss if q == "default" and (d, "sensor") in loss)
    above = [d for d in both if loss[(d, "default")] > loss[(d, "sensor")]]
    below = [d for d in both if loss[(d, "default")] < loss[(d, "sensor")]]
    if not both:
        return f"{security}: no distance with both QoS counted"
    first = f"first above at {above[0]:g} m" if above else "never above"
    return (
        f"{security}: Default's loss above Sensor's at {len(above)} of {len(both)} distances ({first}), "
        f"below at {len(below)}"
    )


def _chen_sweep(summary: ChenSweepSummary, path: str) -> list[str]:
    securities = sorted({r.security for r in summary.rows})
    crossover = "; ".join(chen_crossover(summary.rows, s) for s in securities)
    return [*chen_sweep_table(summary.rows), "", f"Crossover: {crossover}.", "", _source_line(summary, path)]


# --- bench_vpn.py: SROS2 against a VPN, as Kim et al. compared them ---------------------------------


def _versus(value: float | None, base: float | None, unit: str) -> str:
    if value is None or base is None or not base:
        return ""
    return f"{100 * (value - base) / base:+.0f} % ({value - base:+.3f} {unit})"


def vpn_compare_table(rows: list[VpnCompareRow]) -> list[str]:
    lines = [
        "| network | payload (B) | protection | latency = RTT/2 (ms) | vs none | throughput (MB/s) | vs none "
        "| runs (latency / throughput) | conditions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    plain = {(r.network, r.size_b): r for r in rows if r.protection == "none"}
    for r in rows:
        base = plain.get((r.network, r.size_b))
        if r.latency_ms is None and r.throughput_mb_s is None:
            # each kind of reason once, without its figures (the rows' folders keep them)
            failed = f"FAILED: {'; '.join(dict.fromkeys(e.split(' (')[0] for e in r.errors))}"
            lines.append(
                f"| {r.network} | {r.size_b} | {r.protection} | {failed} | | | | | {r.conditions.text()} |"
            )
            continue
        other = base is not None and base is not r
        latency = f"{_fmt(r.latency_ms, 3)}" + (
            f" +- {r.latency_half95_ms:.3f}" if r.latency_half95_ms else ""
        )
        throughput = f"{_fmt(r.throughput_mb_s, 2)}" + (
            f" +- {r.throughput_half95_mb_s:.2f}" if r.throughput_half95_mb_s else ""
        )
        lines.append(
            f"| {r.network} | {r.size_b} | {r.protection} | {latency} "
            f"| {_versus(r.latency_ms, base.latency_ms, 'ms') if other and base else ''} | {throughput} "
            f"| {_versus(r.throughput_mb_s, base.throughput_mb_s, 'MB/s') if other and base else ''} "
            f"| {r.runs_latency} / {r.runs_throughput} | {r.conditions.text()} |"
        )
    return lines


def vpn_compare_findings(rows: list[VpnCompareRow]) -> list[str]:
    """Kim et al.'s findings checked on the rows, one sentence per network: at which payloads the VPN
    added less latency than SROS2 (and less than half of it), and where its throughput was higher."""
    out = []
    for network in dict.fromkeys(r.network for r in rows):
        by = {(r.protection, r.size_b): r for r in rows if r.network == network}
        plain = {size: r for (protection, size), r in by.items() if protection == "none"}
        sros2 = next((p for p, _ in by if p not in ("none", "openvpn")), "sros2")
        less, half, faster, measured = [], [], [], []
        for size, base in plain.items():
            secure, vpn = by.get((sros2, size)), by.get(("openvpn", size))
            if secure is None or vpn is None:
                continue
            plain_ms, sros2_ms, vpn_ms = base.latency_ms, secure.latency_ms, vpn.latency_ms
            if plain_ms is not None and sros2_ms is not None and vpn_ms is not None:
                measured.append(size)
                added_sros2, added_vpn = sros2_ms - plain_ms, vpn_ms - plain_ms
                less += [size] if added_vpn < added_sros2 else []
                half += [size] if added_sros2 > 0 and added_vpn < added_sros2 / 2 else []
            if secure.throughput_mb_s is not None and vpn.throughput_mb_s is not None:
                faster += [size] if vpn.throughput_mb_s > secure.throughput_mb_s else []

        def sizes(found: list[int]) -> str:
            return ", ".join(f"{s} B" for s in found) if found else "no size"

        if not measured:
            out.append(f"{network}: no payload size has a counted latency with each protection.")
            continue
        out.append(
            f"{network}: of {len(measured)} payload sizes, the VPN added less latency than {sros2} at {sizes(less)}, "
            f"less than half of it at {sizes(half)}; its throughput was higher than {sros2}'s at {sizes(faster)}."
        )
    return out


def _vpn_compare(summary: VpnCompareSummary, path: str) -> list[str]:
    s = summary.settings
    head = (
        f"DDS (CycloneDDS) perf rows, {s.get('repetitions', '?')} repetitions of each, interleaved; round trips "
        f"at {s.get('rate_hz', '?')} Hz for {s.get('duration_s', '?')} s, throughput one-way at "
        f"{s.get('throughput_rate_hz', '?')} Hz for {s.get('throughput_duration_s', '?')} s. "
    )
    note = saturated_note([r.conditions for r in summary.rows])
    findings = " ".join(vpn_compare_findings(summary.rows))
    return [*vpn_compare_table(summary.rows), "", findings, "", head + note + _source_line(summary, path)]


# --- bench_wireless_findings.py: the seed's wireless findings beside a twin campaign ----------------

# The seed's network each twin network stands for: the seed's Wi-Fi figures apply to the ideal 802.11
# link and to the lab's Wi-Fi alike.
SEED_MEDIUM = {"wifi-80211": "Wi-Fi", "wifi-lab": "Wi-Fi", "4g": "4G"}


@dataclass(frozen=True)
class SeedFinding:
    name: str
    medium: str  # a value of SEED_MEDIUM
    slower: str  # the middleware the seed found slower (Zhang et al., Array1k mean round trips)
    faster: str


SEED_FINDINGS = (
    SeedFinding("DDS behind Zenoh", "Wi-Fi", "dds", "zenoh-peer"),
    SeedFinding("DDS behind the Zenoh router", "Wi-Fi", "dds", "zenoh-router"),
    SeedFinding("MQTT broker hop", "Wi-Fi", "mqtt-broker", "mqtt-local-broker"),
    SeedFinding("MQTT behind Zenoh", "Wi-Fi", "mqtt-local-broker", "zenoh-peer"),
    SeedFinding("DDS ahead of Zenoh", "4G", "zenoh-peer", "dds"),
    SeedFinding("Zenoh router hop", "4G", "zenoh-router", "zenoh-peer"),
    SeedFinding("MQTT broker hop", "4G", "mqtt-broker", "mqtt-local-broker"),
    SeedFinding("MQTT behind Zenoh", "4G", "mqtt-local-broker", "zenoh-peer"),
    SeedFinding("MQTT behind DDS", "4G", "mqtt-local-broker", "dds"),
)


@dataclass(frozen=True)
class FindingVerdict:
    finding: SeedFinding
    network: str
    seed: tuple[float, float] | None  # slower, faster (ms)
    twin: tuple[float, float] | None
    reproduced: str


def _rtt_interval(row: WirelessFindingsRow) -> dict[str, float | None]:
    return {"low": row.rtt_low_ms, "high": row.rtt_high_ms}


def wireless_verdict(finding: SeedFinding, network: str, rows: list[WirelessFindingsRow]) -> FindingVerdict:
    """The seed's pair, the twin's pair on ``network``, and whether the twin has the seed's direction:
    "yes" when the difference has the seed's sign and the two intervals do not overlap."""
    by = {r.middleware: r for r in rows if r.network == network}
    slow, fast = by.get(finding.slower), by.get(finding.faster)
    seed = None
    if (
        slow is not None
        and fast is not None
        and slow.seed_rtt_ms is not None
        and fast.seed_rtt_ms is not None
    ):
        seed = (slow.seed_rtt_ms, fast.seed_rtt_ms)
    if slow is None or fast is None or slow.rtt_ms is None or fast.rtt_ms is None:
        return FindingVerdict(finding, network, seed, None, "no valid trials")
    twin = (slow.rtt_ms, fast.rtt_ms)
    if seed is None:
        return FindingVerdict(finding, network, None, twin, "no seed figure")
    if (twin[0] > twin[1]) != (seed[0] > seed[1]) or twin[0] == twin[1]:
        reproduced = "no: opposite or no difference"
    elif differ(_rtt_interval(slow), _rtt_interval(fast)):
        reproduced = "yes"
    else:
        reproduced = "same sign, intervals overlap"
    return FindingVerdict(finding, network, seed, twin, reproduced)


def wireless_verdicts(rows: list[WirelessFindingsRow]) -> list[FindingVerdict]:
    """Every finding of the seed on every network of the rows that stands for the finding's network."""
    networks = list(dict.fromkeys(r.network for r in rows))
    return [
        wireless_verdict(f, n, rows)
        for n in networks
        for f in SEED_FINDINGS
        if SEED_MEDIUM.get(n) == f.medium
    ]


def _drift_text(row: WirelessFindingsRow) -> str:
    if row.drift_mm is None:
        return "-"
    if row.drift_low_mm is None or row.drift_high_mm is None:
        return f"{row.drift_mm:.2f} (n={len(row.drift_each_mm)})"
    return f"{row.drift_mm:.2f} [{row.drift_low_mm:.2f}, {row.drift_high_mm:.2f}]"


def _spread(rows: list[WirelessFindingsRow]) -> tuple[float | None, int, int]:
    """The lap drift's pooled standard deviation over the rows' repetitions (mm), its degrees of
    freedom, and the most repetitions of one row."""
    sd, dof = pooled_sd([r.drift_each_mm for r in rows])
    return sd, dof, max((len(r.drift_each_mm) for r in rows), default=0)


def drift_repetitions_needed(row: WirelessFindingsRow, rows: list[WirelessFindingsRow]) -> int | None:
    """Repetitions per middleware that resolve ``row``'s mean lap drift from the least one's on its
    network (fieldtest.analysis.campaign.power, from the network's pooled spread); None for the least
    itself, or without a spread."""
    same = [r for r in rows if r.network == row.network and r.drift_mm is not None]
    sd, _, _ = _spread(same)
    least = min(same, key=lambda r: r.drift_mm or 0.0, default=None)
    if sd is None or least is None or row.drift_mm is None or least.drift_mm is None:
        return None
    difference = row.drift_mm - least.drift_mm
    return repetitions_needed(sd, difference) if difference > 0 else None


def wireless_findings_table(rows: list[WirelessFindingsRow]) -> list[str]:
    lines = [
        "| network | middleware | valid / invalid | seed Array1k RTT mean (ms) | twin probe RTT mean, median over "
        "reps (ms) | interval (coverage) | one-way median / p99 (ms) | loss (%) | lap drift mean [95 % interval] (mm) "
        "| lap drift each rep (mm) | reps to resolve the drift from the least | load | conditions (highest) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        interval = "-"
        if r.rtt_low_ms is not None and r.rtt_high_ms is not None and r.rtt_coverage is not None:
            interval = f"{r.rtt_low_ms:.1f}-{r.rtt_high_ms:.1f} ({100 * r.rtt_coverage:.0f} %)"
        needed = drift_repetitions_needed(r, rows)
        load = f"{r.load_range[0]:.1f}-{r.load_range[1]:.1f}" if len(r.load_range) == 2 else "-"
        lines.append(
            f"| {r.network} | {r.middleware} | {r.valid} / {r.invalid} | {_fmt(r.seed_rtt_ms)} | {_fmt(r.rtt_ms, 1)} "
            f"| {interval} | {_fmt(r.one_way_median_ms)} / {_fmt(r.one_way_p99_ms)} | {_fmt(r.loss_pct)} "
            f"| {_drift_text(r)} | {' / '.join(f'{d:.2f}' for d in r.drift_each_mm) or '-'} "
            f"| {'-' if needed is None else needed} | {load} | {r.conditions.text()} |"
        )
    return lines


def _per_station(values: dict[str, float], digits: int, scale: float = 1.0, unit: str = "") -> str:
    return " / ".join(
        "-" if values.get(s) is None else f"{scale * values[s]:.{digits}f}{unit}" for s in ("host", "robot")
    )


def wireless_mechanisms_table(rows: list[WirelessFindingsRow]) -> list[str]:
    """The 802.11 link's mechanisms per row (rows of other links left out)."""
    lines = [
        "| network | middleware | AP group frames/s, share of all airtime | group frames held to a DTIM | unicast retries "
        "per frame | other stations' share of all airtime | host / robot share of the run dozing | host / robot unicast frames held | "
        "host / robot channel access mean (ms) | host / robot frames deferred | discovery pkt/s | "
        "RTT beyond 2 x one-way (ms) | ns-3 lag p99 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.group_per_s is None and r.unicast_retries_per_frame is None:
            continue
        group = "-"
        if r.group_per_s is not None and r.group_airtime_share is not None:
            group = f"{r.group_per_s:.2f}, {100 * r.group_airtime_share:.1f} %"
        others = "-" if r.others_airtime_share is None else f"{100 * r.others_airtime_share:.1f} %"
        power_save = bool(r.doze_share)
        lines.append(
            f"| {r.network} | {r.middleware} | {group} | {_fmt(r.group_frames_held, 1)} "
            f"| {_fmt(r.unicast_retries_per_frame, 3)} | {others} "
            f"| {_per_station(r.doze_share, 1, 100.0, ' %') if power_save else '-'} "
            f"| {_per_station(r.frames_held, 1) if power_save else '-'} "
            f"| {_per_station(r.channel_access_mean_ms, 3) if r.channel_access_mean_ms else '-'} "
            f"| {_per_station(r.channel_access_deferred, 1, 100.0, ' %') if r.channel_access_deferred else '-'} "
            f"| {_fmt(r.discovery_per_s)} | {_fmt(r.rtt_excess_ms, 1)} | {_fmt(r.lag_p99_ms)} |"
        )
    return lines if len(lines) > 2 else []


def wireless_set_aside_lines(rows: list[WirelessFindingsRow]) -> list[str]:
    """Why the stack check set trials aside, per row (nothing when it set none aside)."""
    reasons = [
        f"{r.network} {r.middleware}: {' | '.join(r.invalid_reasons)}" for r in rows if r.invalid_reasons
    ]
    return [f"Set aside by the stack check: {'; '.join(reasons)}.", ""] if reasons else []


def wireless_verdict_table(verdicts: list[FindingVerdict]) -> list[str]:
    lines = [
        "| finding | network | seed RTT slower / faster (ms) | twin RTT slower / faster (ms) | direction reproduced |",
        "|---|---|---|---|---|",
    ]
    for v in verdicts:
        seed = "-" if v.seed is None else f"{v.seed[0]:.2f} / {v.seed[1]:.2f}"
        twin = "-" if v.twin is None else f"{v.twin[0]:.1f} / {v.twin[1]:.1f}"
        lines.append(
            f"| {v.finding.name} ({v.finding.slower} slower than {v.finding.faster}) | {v.network} | {seed} "
            f"| {twin} | {v.reproduced} |"
        )
    return lines


def wireless_drift_lines(rows: list[WirelessFindingsRow]) -> list[str]:
    """Per network, computed from the rows: the lap drift's range over the middlewares, its pooled
    spread, the difference the repetitions resolve, and the repetitions the largest difference needs."""
    out = []
    for network in dict.fromkeys(r.network for r in rows):
        same = [r for r in rows if r.network == network and r.drift_mm is not None]
        if not same:
            out.append(f"{network}: no valid trial has a lap drift.")
            continue
        least = min(same, key=lambda r: r.drift_mm or 0.0)
        most = max(same, key=lambda r: r.drift_mm or 0.0)
        text = (
            f"{network}: mean lap drift from {least.drift_mm:.2f} mm ({least.middleware}) to {most.drift_mm:.2f} mm "
            f"({most.middleware})"
        )
        sd, dof, n = _spread(same)
        if sd is None:
            out.append(text + "; too few repetitions for a spread.")
            continue
        text += (
            f"; pooled standard deviation {sd:.2f} mm ({dof} degree{'' if dof == 1 else 's'} of freedom). "
            f"Two-sided t test, alpha {ALPHA:g}, power {POWER:.0%}: "
        )
        smallest = smallest_difference(sd, n)
        text += f"{n} repetitions each resolve {smallest:.2f} mm" if smallest is not None else ""
        difference = (most.drift_mm or 0.0) - (least.drift_mm or 0.0)
        if difference > 0:
            text += (
                f"; the largest difference ({difference:.2f} mm) needs {repetitions_needed(sd, difference)} "
                "repetitions of each"
            )
        out.append(text + ".")
    return out


def _wireless_findings(summary: WirelessFindingsSummary, path: str) -> list[str]:
    s = summary.settings
    head = (
        f"Campaign {_listed(s.get('campaigns', '?'))}: {s.get('trials', '?')} trials, plan of "
        f"{s.get('plan_laps', '?')} laps ({s.get('plan_s', '?')} s), topology {s.get('topology', '?')}. "
    )
    verdicts = wireless_verdicts(summary.rows)
    reproduced = [v for v in verdicts if v.reproduced == "yes"]
    unmeasured = [v for v in verdicts if v.twin is None]
    count = f"Direction reproduced: {len(reproduced)} of {len(verdicts)} findings" + (
        f" ({len(unmeasured)} without valid trials of both middlewares)." if unmeasured else "."
    )
    return [
        *wireless_findings_table(summary.rows),
        "",
        *wireless_set_aside_lines(summary.rows),
        *(mechanisms + [""] if (mechanisms := wireless_mechanisms_table(summary.rows)) else []),
        *wireless_verdict_table(verdicts),
        "",
        count,
        "",
        "Lap drift per network, and the repetitions that resolve it (the power analysis of `compare`, "
        "docs/analysis.md):",
        "",
        *(f"- {line}" for line in wireless_drift_lines(summary.rows)),
        "",
        head + saturated_note([r.conditions for r in summary.rows]) + _source_line(summary, path),
    ]


# --- the blocks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    reference: str  # file name in reference/
    render: Callable[..., list[str]]
    reads: tuple[str, ...] = ()  # more files of the repository it renders from: render(summary, path, root)
    counts_only: bool = False  # renders counts of its rows' verdicts, no table of their figures


BLOCKS: dict[str, Block] = {
    "perf-overhead": Block("bench-perf.json", _perf_overhead),
    "wifi80211-link": Block("bench-wifi80211.json", _wifi80211_link),
    "zenoh-bridge": Block("bench-zenoh-bridge.json", _zenoh_bridge),
    "twin-loopback-drift": Block("bench-twin-drift.json", _twin_drift),
    "forwarder-cost": Block("bench-netem.json", _forwarder_cost),
    "security-cost": Block("bench-security.json", _security_cost),
    "robot-traffic": Block("bench-robot-traffic.json", _robot_traffic),
    "robot-traffic-wifi-lab": Block("bench-robot-traffic-wifi-lab.json", _robot_traffic),
    "analysis-speed": Block("bench-analysis.json", _analysis_speed),
    "wifi-lab-link": Block("bench-wifi-lab.json", _wifi80211_link),
    "forwarding": Block("bench-forwarding.json", _forwarding),
    "security-cost-sensor": Block("bench-security-sensor.json", _security_cost),
    "reproduction": Block("bench-reproduction.json", _reproduction, reads=(REPRODUCTION_SCRIPT,)),
    "reproduction-counts": Block(
        "bench-reproduction.json", _reproduction_counts, reads=(REPRODUCTION_SCRIPT,), counts_only=True
    ),
    "chen-sweep": Block("bench-chen-sweep.json", _chen_sweep),
    "newcomer": Block("bench-newcomer.json", _newcomer),
    "vpn-compare": Block("bench-vpn.json", _vpn_compare),
    "wireless-findings": Block("bench-wireless-findings.json", _wireless_findings),
}


def render(name: str, root: Path) -> str:
    block = BLOCKS[name]
    path = f"{REFERENCE_DIR}/{block.reference}"
    extra = (root,) if block.reads else ()
    return "\n".join(block.render(read_reference(root / path), path, *extra)) + "\n"


def doc_paths(root: Path) -> list[Path]:
    return sorted({p for pattern in DOC_FILES for p in root.glob(pattern)})


def block_names(text: str) -> list[str]:
    """The generated blocks of a document, in order."""
    return [m["name"] for m in _BLOCK.finditer(text)]


def fill(text: str, root: Path) -> str:
    """The text with every generated block rendered anew from its summary."""

    def body(match: re.Match[str]) -> str:
        name = match["name"]
        return f"<!-- generated: {name} -->\n{render(name, root)}<!-- end: {name} -->"

    return _BLOCK.sub(body, text)


def _section(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the Markdown section that holds text[start:end]: its heading to the next heading."""
    headings = [m.start() for m in re.finditer(r"^#+ ", text, re.MULTILINE)]
    begin = max((pos for pos in headings if pos <= start), default=0)
    return begin, min((pos for pos in headings if pos > end), default=len(text))


def problems(root: Path) -> list[str]:
    """What keeps the docs out of step with ``reference/``: one line per problem, naming the file."""
    found: list[str] = []
    for path in doc_paths(root):
        text = path.read_text()
        where = path.relative_to(root)
        blocks = list(_BLOCK.finditer(text))
        if len(_OPEN.findall(text)) != 2 * len(blocks):
            found.append(
                f"{where}: a generated block's markers do not pair up (<!-- generated: NAME --> ... <!-- end: NAME -->)"
            )
        for match in blocks:
            name = match["name"]
            if name not in BLOCKS:
                found.append(f"{where}: unknown generated block {name!r} (known: {', '.join(BLOCKS)})")
                continue
            if match["body"] != render(name, root):
                found.append(
                    f"{where}: block {name!r} differs from {REFERENCE_DIR}/{BLOCKS[name].reference} (run tools/render_docs.py)"
                )
            found += _quoted_outside(text, match, blocks, f"{where}: section of block {name!r}")
    return found


def _quoted_outside(text: str, match: re.Match[str], blocks: list[re.Match[str]], where: str) -> list[str]:
    """Figures of the block (and its tables' header rows) quoted in its section outside any block."""
    begin, end = _section(text, match.start(), match.end())
    outside = text[begin:end]
    for other in sorted(
        (b for b in blocks if begin <= b.start() and b.end() <= end), key=lambda b: -b.start()
    ):
        outside = outside[: other.start() - begin] + outside[other.end() - begin :]
    body = match["body"]
    figures = {f for f in _FIGURE.findall(_STANDARD.sub("", body)) if _is_figure(f)}
    prose = _CODE.sub("", outside)
    found = [f"{where}: quotes {f} outside the block" for f in sorted(set(_FIGURE.findall(prose)) & figures)]
    lines = body.splitlines()
    headers = {line for line, below in zip(lines, lines[1:], strict=False) if _RULE.fullmatch(below)}
    found += [
        f"{where}: repeats the block's table outside it: {line[:60]}"
        for line in outside.splitlines()
        if line in headers
    ]
    return found


# --- bench_lab_latency.py: the lab path beside the twin's DDS path and ddsperf -----------------------

_LAB_PATHS = {
    "lab": "lab path (rclpy, Fast DDS)",
    "twin": "twin DDS path (C stamps)",
    "ddsperf": "ddsperf (RTT / 2)",
}
LAB_MEDIAN_TARGET_MS, LAB_P99_TARGET_MS = 0.2, 1.0  # lab path against the twin's, on a quiet machine


def lab_latency_table(rows: list[LabLatencyRow]) -> list[str]:
    lines = [
        "| path | round | samples | one-way p50 / p90 / p99 / max ms | conditions |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_LAB_PATHS[r.path]} | {'pooled' if r.round is None else r.round} | {r.count} | "
            f"{r.p50_ms:.3f} / {r.p90_ms:.3f} / {r.p99_ms:.3f} / {r.max_ms:.3f} | {r.conditions.text()} |"
        )
    return lines


def lab_latency_verdict(rows: list[LabLatencyRow]) -> str:
    """The pooled lab path against the pooled twin path, as the script judges it."""
    pooled = {r.path: r for r in rows if r.round is None}
    lab, twin = pooled["lab"], pooled["twin"]
    d50, d99 = lab.p50_ms - twin.p50_ms, lab.p99_ms - twin.p99_ms
    met = d50 <= LAB_MEDIAN_TARGET_MS and d99 <= LAB_P99_TARGET_MS
    return (
        f"Lab path minus twin path, pooled: median {d50:+.3f} ms (target <= {LAB_MEDIAN_TARGET_MS}), "
        f"p99 {d99:+.3f} ms (target <= {LAB_P99_TARGET_MS}): **{'met' if met else 'not met'}** "
        "under the conditions in the table."
    )


def _lab_latency(summary: LabLatencySummary, path: str) -> list[str]:
    note = saturated_note([r.conditions for r in summary.rows])
    return [
        *lab_latency_table(summary.rows),
        "",
        lab_latency_verdict(summary.rows),
        "",
        note + _source_line(summary, path),
    ]


# --- bench_predict.py: fieldtest predict against twin trials with link faults -----------------------


def predict_table(rows: list[PredictCaseRow]) -> list[str]:
    lines = [
        "| case | middleware, network | longest silence | predicted drift | measured drift | difference | "
        "watchdog stops predicted / counted | conditions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        measured = "-" if r.measured_drift_mm is None else f"{r.measured_drift_mm:.1f} mm"
        diff = "-" if r.measured_drift_mm is None else f"{r.predicted_drift_mm - r.measured_drift_mm:+.1f} mm"
        lines.append(
            f"| {r.case} | {r.middleware}, {r.network} | {r.longest_silence_s:.2f} s | {r.predicted_drift_mm:.1f} mm | "
            f"{measured} | {diff} | {r.stops_predicted} / {r.stops_counted} | {r.conditions.text()} |"
        )
    return lines


def _predict(summary: PredictSummary, path: str) -> list[str]:
    return [*predict_table(summary.rows), "", _source_line(summary, path)]


# --- bench_relay_steps.py: the perf relay's Python steps, cold and warm ------------------------------


def relay_steps_table(rows: list[RelayStepRow]) -> list[str]:
    lines = ["| step | cold us | warm us | conditions |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.step} | {r.cold_us:.1f} | {r.warm_us:.2f} | {r.conditions.text()} |")
    return lines


def _relay_steps(summary: RelayStepsSummary, path: str) -> list[str]:
    return [*relay_steps_table(summary.rows), "", _source_line(summary, path)]


BLOCKS["lab-latency"] = Block("bench-lab-latency.json", _lab_latency)
BLOCKS["predict-against-twin"] = Block("bench-predict.json", _predict)
BLOCKS["relay-steps"] = Block("bench-relay-steps.json", _relay_steps)


# --- hand-quoted tables: measured figures outside any generated block -------------------------------

# A table of inputs (configured values, a source's published figures, thresholds) says so in a
# comment right above it; every other table holding a figure must be a generated block.
NOT_MEASURED = re.compile(r"<!-- not measured: (?P<reason>\S.*?) -->")
_TABLE_FIGURE = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")  # 0.3, 16.7: integers are counts, sizes, ports
_NOT_A_FIGURE = re.compile(rf"`[^`]*`|{_STANDARD.pattern}")  # code, and the standard's name


def _tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of each Markdown table: a header row, its rule, its rows."""
    spans, i = [], 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and _RULE.fullmatch(lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            spans.append((i, end))
            i = end
        else:
            i += 1
    return spans


def table_figures(row: str) -> list[str]:
    """The figures a table row holds: decimal numbers outside code spans, past its first cell."""
    cells = _NOT_A_FIGURE.sub("", row).strip().strip("|").split("|")[1:]
    return [f for cell in cells for f in _TABLE_FIGURE.findall(cell)]


def _outside_blocks(text: str) -> list[str]:
    """The document's lines with every generated block blanked (the line numbers kept)."""
    for block in reversed(list(_BLOCK.finditer(text))):
        text = text[: block.start()] + "\n" * block.group(0).count("\n") + text[block.end() :]
    return text.splitlines()


def _marked_as_inputs(lines: list[str], first: int) -> bool:
    """The nearest non-blank line above ``first`` says what is not measured there."""
    above = next((line for line in reversed(lines[:first]) if line.strip()), "")
    return NOT_MEASURED.fullmatch(above.strip()) is not None


def hand_quoted_tables(root: Path) -> list[str]:
    """Tables outside the generated blocks that hold figures and are not marked as inputs: one line
    each, naming the file, the line and a figure."""
    found: list[str] = []
    for path in doc_paths(root):
        where = str(path.relative_to(root))
        lines = _outside_blocks(path.read_text())
        for first, end in _tables(lines):
            if _marked_as_inputs(lines, first):
                continue
            figures = [f for row in lines[first + 2 : end] for f in table_figures(row)]
            if figures:
                found.append(
                    f"{where}:{first + 1}: a table quotes figures by hand ({', '.join(figures[:3])}, ...): "
                    "render it from reference/ in a generated block, or mark a table of inputs "
                    "<!-- not measured: why -->"
                )
    return found


# --- figures quoted by hand in prose and code blocks ----------------------------------------------

# Not figures: code spans and a command's option values (arguments, a field's default), the
# standard's name, and versions (Ubuntu 24.04, Python 3.12, ns-3 3.37, Fast DDS 2.14, Rust 1.89)
_NOT_A_PROSE_FIGURE = re.compile(
    rf"`[^`\n]*`|(?<!\w)--?[a-zA-Z][\w-]*[ =]-?\d+(?:\.\d+)?|{_STANDARD.pattern}|\b\d{{2}}\.(?:04|10)\b"
    r"|(?i:Ubuntu|Debian|C?Python|glibc|ns-3|numpy|Fast DDS|Fast RTPS|CycloneDDS|Rust|kernel)"
    r"[\s-]+\d+(?:\.\d+)+"
)


def _paragraphs(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of each paragraph: a fenced code block, or non-blank lines."""
    spans, i = [], 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        end = i + 1
        if lines[i].lstrip().startswith("```"):
            while end < len(lines) and not lines[end].lstrip().startswith("```"):
                end += 1
            end += 1
        else:
            while end < len(lines) and lines[end].strip() and not lines[end].lstrip().startswith("```"):
                end += 1
        spans.append((i, min(end, len(lines))))
        i = end
    return spans


@functools.cache
def _plan_figures() -> frozenset[str]:
    """The seed study's square as the kit's plan holds it (speed, side): inputs wherever quoted."""
    from fieldtest.plan import SquarePlan

    plan = SquarePlan()
    return frozenset({f"{plan.linear_speed_mps:.2f}", f"{plan.side_m:.2f}"})


def prose_figures(text: str) -> list[str]:
    """The figures a paragraph quotes (decimals of three digits or more, the plan's own aside), its
    table rows left out (``hand_quoted_tables`` reads those)."""
    prose = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))
    figures = _FIGURE.findall(_NOT_A_PROSE_FIGURE.sub("", prose))
    return [f for f in figures if _is_figure(f) and f not in _plan_figures()]


def hand_quoted_figures(root: Path) -> list[str]:
    """Paragraphs and code blocks outside the generated blocks that quote figures and are not marked
    as inputs (settings, a source's or a seed's published figures, arithmetic on them): one line
    each, naming the file, the line and a figure. A measured figure belongs in a generated block."""
    found: list[str] = []
    for path in doc_paths(root):
        where = str(path.relative_to(root))
        lines = _outside_blocks(path.read_text())
        for first, end in _paragraphs(lines):
            marked = _marked_as_inputs(lines, first) or NOT_MEASURED.fullmatch(lines[first].strip())
            figures = prose_figures("\n".join(lines[first:end]))
            if figures and not marked:
                found.append(
                    f"{where}:{first + 1}: quotes figures by hand ({', '.join(figures[:3])}, ...): render "
                    "them from reference/ in a generated block, or mark a paragraph of inputs "
                    "<!-- not measured: why -->"
                )
    return found
