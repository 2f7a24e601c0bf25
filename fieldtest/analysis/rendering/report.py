"""The Markdown report of one trial, written from metrics.json alone (through its schema)."""

from __future__ import annotations

from pathlib import Path

from fieldtest.analysis.loading.mocaptime import time_axis_line
from fieldtest.analysis.metrics.schema import SHARED_CLOCK, Closing, Latency, Metrics, Stats
from fieldtest.analysis.metrics.wiretraffic import wire_lines
from fieldtest.analysis.rendering.foxglove import foxglove_line
from fieldtest.analysis.rendering.reportcauses import causes_lines, stack_lines, validity_lines
from fieldtest.analysis.rendering.reportmeasures import base_lines, lateness_lines, link_line, relative_lines


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value * scale:.{digits}f}{(' ' + unit) if unit else ''}"


def _mm(value_m: float | None, digits: int = 1) -> str:
    return _fmt(value_m, 1000.0, digits, "mm")


def write_report(path: Path, metrics: Metrics) -> None:
    path.write_text("\n".join(report_lines(metrics)) + "\n")


def report_lines(m: Metrics) -> list[str]:
    trial = m.trial
    lines = [
        f"# Trial {trial.name} ({trial.trial_id})",
        "",
        f"middleware **{trial.middleware}**, security **{trial.security}**, network **{trial.network}**, "
        f"QoS {trial.qos}, repetition {trial.repetition}, robot {trial.robot_model}" + _set_up(m),
        "",
    ]
    if m.partial:
        lines += ["**Partial result:**", ""] + [f"- {r}" for r in m.partial_reasons] + [""]
    lines += validity_lines(m)
    lines += _summary(m) + _progress(m) + _drift(m) + causes_lines(m) + _ape(m) + relative_lines(m)
    lines += _latency(m) + base_lines(m) + robot_traffic_lines(m) + wire_lines(m.wire) + _mocap(m)
    lines += stack_lines(m) + _context(m)
    warnings = m.warnings + [f"(trial) {w}" for w in m.outcome.warnings]
    if warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in warnings] + [""]
    lines += [foxglove_line(), ""]
    lines += [
        f"Analysis took {m.analysis_s or 0:.2f} s; definitions in docs/analysis.md (metrics version {m.metrics_version})."
    ]
    return lines


def robot_traffic_lines(m: Metrics) -> list[str]:
    """The robot's own topics beside the commands: what it sent, what the host's tool received."""
    section = m.robot_traffic
    if section is None:
        return []
    out = [
        f"## Robot traffic: preset {section.preset}",
        "",
        "The robot published these topics while the host streamed; the host pulled them as an operator's "
        'tool would (docs/networks.md, "The robot\'s own traffic").',
        "",
        "| topic | rate Hz | bytes | sent | received | received Hz | lost in span | age median ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for topic, f in section.topics.items():
        age = f.age_ms.median if f.age_ms is not None else None
        out.append(
            f"| {topic} | {_fmt(f.rate_hz, digits=1)} | {_na(f.size_bytes)} | {_na(f.sent)} "
            f"| {_na(f.received)} | {_fmt(f.received_hz, digits=1)} | {_na(f.lost_in_span)} "
            f"| {_fmt(age, digits=2)} |"
        )
    if graph := section.graph:
        out += [
            "",
            f"ROS graph announced by the robot: {graph.participants} DDS participants ({', '.join(graph.nodes)}).",
        ]
    return out + [""]


def _set_up(m: Metrics) -> str:
    """The settings that change a middleware's timing: where each machine sits (twin), Nagle's
    algorithm on MQTT clients."""
    out = ""
    if nodes := (m.outcome.model_extra or {}).get("nodes"):
        out += f", topology {m.trial.topology}: " + ", ".join(f"{n} on {link}" for n, link in nodes.items())
    nagle = m.trial.mqtt_nagle
    if nagle is None:
        return out
    if nagle:
        return out + ", MQTT clients with Nagle's algorithm (as mqtt_client's Paho C)"
    return out + ", MQTT clients without Nagle's algorithm (TCP_NODELAY)"


def _na(value: object) -> str:
    return "n/a" if value is None else str(value)


def _summary(m: Metrics) -> list[str]:
    d, lat = m.drift, m.latency
    rows = [
        ("drift lap N vs lap 1, mean", _mm(d.mean_m)),
        ("drift at lap end", _mm(d.at_lap_end_m)),
        ("heading change", _fmt(d.heading_change_deg, digits=2, unit="deg")),
        ("closing error of the run", _mm(d.closing.distance_m if d.closing else None)),
        ("APE vs ideal square (RMSE)", _mm(m.ape.rmse_m)),
        (
            "one-way latency, median",
            _fmt(lat.one_way_ms.median if lat.one_way_ms else None, digits=2, unit="ms"),
        ),
        ("commands lost", f"{_na(lat.lost)} of {_na(lat.commands_sent)}"),
    ]
    out = ["## Summary", "", "| metric | value |", "| --- | --- |"]
    out += [f"| {k} | {v} |" for k, v in rows] + [""]
    for plot in m.plots:
        out += [f"![{plot}]({plot})", ""]
    return out


def _progress(m: Metrics) -> list[str]:
    p, o = m.progress, m.outcome
    out = [
        "## How far the trial got",
        "",
        f"- ended: **{o.end_reason}**" + (f" ({o.end_detail})" if o.end_detail else ""),
        f"- laps: {p.laps_completed} completed of {p.laps_planned} planned "
        f"(all commands sent for {p.laps_commanded}, ground truth covers {p.laps_observed})",
        f"- last command seq sent {p.last_seq_sent}, received {p.last_seq_received} "
        f"(plan has {p.commands_planned} ticks)",
        "",
    ]
    mo = m.motion
    if mo.start_s is not None:
        out += [
            f"Motion start (ground truth): {mo.start_s:.3f} s after stream start; first moving command sent at "
            f"{_fmt(mo.first_command_s, digits=3, unit='s')} (lag {_fmt(mo.start_lag_s, 1000, 1, 'ms')}), "
            f"received at {_fmt(mo.first_received_s, digits=3, unit='s')}. Rigid-body yaw offset "
            f"{mo.body_yaw_offset_deg:.2f} deg.",
            "",
        ]
    return out


def _drift(m: Metrics) -> list[str]:
    d = m.drift
    if not d.available:
        return ["## Drift", "", f"Not available: {d.reason or 'n/a'}.", ""]
    out = [
        f"## Drift: lap {d.last_lap} against lap 1",
        "",
        f"Phase-aligned distance on a {_fmt(d.grid_step_s, 1000.0, 0, 'ms')} grid ({d.grid_points} points, "
        f"{d.excluded_points} excluded for mocap gaps): mean {_mm(d.mean_m)}, RMS {_mm(d.rms_m)}, "
        f"max {_mm(d.max_m)}, at lap end {_mm(d.at_lap_end_m)}.",
        f"Heading change {_fmt(d.heading_change_deg, digits=2, unit='deg')} "
        f"(at lap end {_fmt(d.heading_change_at_lap_end_deg, digits=2, unit='deg')}).",
        "",
        "| corner | dx (forward) | dy (left) | distance |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| {c.corner} | {_mm(c.dx_m)} | {_mm(c.dy_m)} | {_mm(c.distance_m)} |" for c in d.corners]
    closing = d.closing or Closing()
    out += [
        "",
        f"Closing error after {d.last_lap} laps: {_mm(closing.distance_m)} "
        f"(dx {_mm(closing.dx_m)}, dy {_mm(closing.dy_m)}), heading {_fmt(closing.heading_deg, digits=2, unit='deg')}.",
        "",
        "| lap vs lap 1 | mean | RMS | max | at lap end |",
        "| --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {p.lap} | {_mm(p.mean_m)} | {_mm(p.rms_m)} | {_mm(p.max_m)} | {_mm(p.at_lap_end_m)} |"
        for p in d.per_lap
    ]
    return out + [""]


def _ape(m: Metrics) -> list[str]:
    a = m.ape
    if not a.available:
        return ["## Error against the ideal square", "", f"Not available: {a.reason or 'n/a'}.", ""]
    return [
        "## Error against the ideal square",
        "",
        f"{a.tool}, APE {a.relation}, {a.alignment} alignment, {a.poses} poses: RMSE {_mm(a.rmse_m)}, "
        f"mean {_mm(a.mean_m)}, median {_mm(a.median_m)}, max {_mm(a.max_m)}.",
        "",
    ]


def _stats_row(name: str, s: Stats | None) -> str:
    if s is None or not s.count:
        return f"| {name} | 0 | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a |"
    cells = [_fmt(v, digits=3) for v in (s.median, s.mean, s.std, s.min, s.max, s.p90, s.p99, s.p99_99)]
    return f"| {name} | {s.count} | " + " | ".join(cells) + " |"


def _duplicates_note(m: Metrics) -> list[str]:
    """Why a bridged Zenoh trial can count duplicates (none expected from the middleware itself)."""
    if not m.latency.duplicates or m.trial.zenoh_path != "bridge":
        return []
    return [
        "Duplicates through zenoh-bridge-ros2dds: a bridge that sees a publisher of a bridged topic go "
        "away and come back while it keeps running adds another DDS reader (a plugin bug), and each "
        "extra reader forwards every command once more. Was a publisher restarted mid-trial, or were the "
        "bridges not restarted since the previous trial? (The twin starts fresh bridges per trial.)",
        "",
    ]


def _offset_channel(lat: Latency) -> str:
    """Where the clock probes travelled (lab trials name it: the link, or plain UDP)."""
    if lat.clock_offset_source == "udp":
        return " over UDP (not over the measured link)"
    return " over the link" if lat.clock_offset_source == "link" else ""


def _latency(m: Metrics) -> list[str]:
    lat = m.latency
    out = ["## Link", ""]
    if not lat.available:
        return out + ["No command receipts from the robot: latency and loss not available.", ""]
    clock = lat.clock
    out += [
        f"Commands sent {lat.commands_sent} (from the {lat.expected_from}), received {lat.commands_received}, "
        f"lost {lat.lost} ({_fmt(lat.loss_ratio, 100, 2, '%')}), duplicates {lat.duplicates}, out of order {lat.out_of_order}. "
        f"Jitter (std of inter-arrival) {_fmt(lat.jitter_ms, digits=3, unit='ms')}, "
        f"mean |latency change| {_fmt(lat.ipdv_ms, digits=3, unit='ms')}.",
        "",
        *_duplicates_note(m),
        *_clock_lines(lat),
        "| ms | n | median | mean | std | min | max | p90 | p99 | p99.99 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        _stats_row(
            "one-way (shared clock)"
            if clock is not None and clock.method == SHARED_CLOCK
            else "one-way (offline correction)",
            lat.one_way_ms,
        ),
        *_ntp_rows(lat),
        _stats_row("one-way (robot's live estimate)", lat.one_way_live_ms),
        _stats_row("inter-arrival", lat.interarrival_ms),
        _stats_row("round trip (clock probes)", lat.round_trip_ms),
        "",
        *lateness_lines(m),
    ]
    if lat.arrival_stamp:
        stamp = lat.arrival_stamp
        counts = ", ".join(f"{k} {v}" for k, v in stamp.get("arrivals", {}).items())
        out += [
            f"Arrival stamp: **{stamp.get('source')}** ({stamp.get('rmw')}, ROS 2 {stamp.get('ros_distro')}; "
            f"{counts}): {stamp.get('includes')}.",
            "",
        ]
    if lat.unrecorded:
        out += [
            f"The robot's logger stopped mid-trial: {lat.unrecorded} commands sent after its last "
            "written receipt are unrecorded (they may have arrived) and are not counted as lost; "
            "the loss ratio covers the commands up to that receipt.",
            "",
        ]
    if lat.lost_spans:
        spans = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in lat.lost_spans[:30])
        out += [f"Lost sequence numbers: {spans}{' ...' if len(lat.lost_spans) > 30 else ''}", ""]
    if lat.lost_to_history_overflow:
        out += [
            f"{lat.lost_to_history_overflow} of the {lat.lost} lost commands were lost while the path "
            "was delayed by more than the QoS history holds (its depth of commands): a KEEP_LAST "
            "history on the path overwrote them before they were taken.",
            "",
        ]
    if lat.lost_to_reader_stalls:
        out += [
            f"{lat.lost_to_reader_stalls} of the {lat.lost} lost commands were overwritten in the "
            "robot's own reader: it took nothing while its QoS history filled (the robot computer "
            "stalled, not the link).",
            "",
        ]
    return out


def _clock_lines(lat: Latency) -> list[str]:
    """Where the one-way figures' clock correction comes from, and how far the NTP-style one can be off."""
    clock = lat.clock
    if clock is None:
        return []
    if clock.method != SHARED_CLOCK:
        bound = clock.min_delay_s
        return [
            f"Clock correction: {clock.method} (NTP-style){_offset_channel(lat)}, host - robot = "
            f"{_fmt(clock.offset_s, 1000, 3, 'ms')}, drift {_fmt(clock.drift_ppm, digits=2, unit='ppm')}. Its error is at most half the path's "
            "asymmetry (the two directions' one-way delays differ), which separate clocks cannot measure"
            + (
                f"; at most half the fastest probe's round trip, {_fmt(bound, 500, 3, 'ms')}."
                if bound
                else "."
            ),
            "",
        ]
    out = [
        f"Clock: shared (every process of the trial read this machine's clock), host - robot = "
        f"{_fmt(clock.offset_s, 1000, 3, 'ms')}: one-way figures are arrival minus send time on it.",
    ]
    ntp = lat.ntp_estimate
    if ntp is None:
        return [" ".join(out), ""]
    if ntp.available:
        err = ntp.offset_error_ms or Stats()
        out.append(
            f"The NTP-style estimate from the clock probes, which is all the lab has "
            f"({ntp.clock.method}), puts host - robot at {_fmt(ntp.clock.offset_s, 1000, 3, 'ms')}: "
            f"error {_fmt(err.median, digits=3, unit='ms')} at the median command "
            f"({_fmt(err.min, digits=3)} to {_fmt(err.max, digits=3, unit='ms')}), one-way median "
            f"off by {_fmt(ntp.median_error_ms, digits=3, unit='ms')}."
        )
    if asym := ntp.path_asymmetry:
        out.append(
            f"Path measured before the trial: host to robot {asym.host_to_robot_ms:.2f} ms, robot to host "
            f"{asym.robot_to_host_ms:.2f} ms (median one way); asymmetry {asym.asymmetry_ms:.2f} ms. An "
            f"NTP-style offset is off by half the asymmetry of the probes it rests on: about "
            f"{asym.ntp_error_bound_ms:.2f} ms from these medians, more where jitter makes single probes "
            "more lopsided."
        )
    return [" ".join(out), ""]


def _ntp_rows(lat: Latency) -> list[str]:
    ntp = lat.ntp_estimate
    if ntp is None or not ntp.available:
        return []
    return [_stats_row("one-way (NTP-style estimate, as the lab)", ntp.one_way_ms)]


def _mocap(m: Metrics) -> list[str]:
    mc = m.mocap  # which fields it has depends on the source (docs/analysis.md, "Mocap gaps")
    if mc.valid_poses is None:
        return ["## Motion capture", "", "No ground truth.", ""]
    src = mc.source
    topic, bag = (src.topic, src.bag) if src is not None else (None, None)
    out = [
        "## Motion capture",
        "",
        f"Source {topic} in the {bag} bag, {_fmt(mc.rate_hz, digits=1, unit='Hz')}, {mc.valid_poses} valid poses.",
    ]
    if mc.frames is not None:
        out.append(
            f"Frames received {mc.frames}: tracking invalid {mc.tracking_invalid} ({mc.invalid_runs} runs), "
            f"lost in transit {mc.lost_in_transit}."
        )
    if mc.in_analysis_gaps is not None:
        out.append(
            f"In the analyzed window: {mc.in_analysis_gaps} gaps ({mc.in_analysis_missing_samples} samples missing), "
            f"{mc.in_analysis_bridged_gaps} bridged by interpolation (<= {mc.max_bridged_gap_s} s), "
            f"{mc.in_analysis_excluded_gaps} excluded ({_fmt(mc.in_analysis_excluded_s, digits=3)} s); "
            f"longest {_fmt(mc.in_analysis_longest_gap_s, digits=3)} s."
        )
    if axis := time_axis_line(mc.time):
        out.append(axis)
    return out + [""]


def _context(m: Metrics) -> list[str]:
    o = m.outcome
    out = ["## Conditions", ""]
    if o.link:
        out.append(link_line(o.link))
    if o.cpu:
        out += ([""] if len(out) > 2 else []) + [
            "| process | CPU s | CPU % of one core |",
            "| --- | --- | --- |",
        ]
        out += [
            f"| {p} | {_fmt(v.get('cpu_s'), digits=2)} | {_fmt(v.get('cpu_percent'), digits=1)} |"
            for p, v in o.cpu.items()
        ]
    faults = m.faults
    if faults:
        out += ([""] if len(out) > 2 else []) + [
            "| fault | start (s) | duration (s) | detail | commands sent | lost |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        per = {(f.start_s, f.duration_s): f for f in m.latency.faults}
        for f in faults:
            stat = per.get((f.start_s, f.duration_s))
            sent, lost = (stat.commands_sent, stat.commands_lost) if stat is not None else ("n/a", "n/a")
            out.append(f"| {f.kind} | {f.start_s:.2f} | {f.duration_s:.2f} | {f.detail} | {sent} | {lost} |")
    if len(out) == 2:
        out.append("No link measurement, CPU figures or faults recorded.")
    return out + [""]
