"""report.md sections for the stack's own timing faults and the drift split into causes."""

from __future__ import annotations

from fieldtest.analysis.metrics.schema import Metrics, PhaseSpread, RestSplit, SegmentChanges


def _mm(value_m: float | None) -> str:
    return "n/a" if value_m is None else f"{value_m * 1e3:.2f} mm"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} ms"


def validity_lines(m: Metrics) -> list[str]:
    """The verdict, first in the report: valid, invalid (why, what to do) or unknown."""
    stack = m.stack
    if stack is None:
        return []
    cautions = [f"Caution: {c}." for c in stack.cautions] + ([""] if stack.cautions else [])
    if stack.valid is True:
        return [
            f"**Valid:** the machine's own timing explains {_mm(stack.stack_drift_m)} of lap drift "
            f"(bound {stack.bound['stack_drift_m'] * 1e3:g} mm).",
            "",
            *cautions,
        ]
    if stack.valid is False:
        return (
            ["**Invalid trial** (kept, but left out of comparisons):", ""]
            + [f"- {r}" for r in stack.invalid_reasons]
            + ["", f"What to do: {stack.advice}.", ""]
            + cautions
        )
    return [f"**Validity unknown:** {stack.advice or 'no stack figures'}.", ""]


def causes_lines(m: Metrics) -> list[str]:
    c = m.drift_causes
    if c is None or not c.available:
        return ["## Drift by cause", "", f"Not available: {(c.reason if c else '') or 'n/a'}.", ""]
    replay = c.replay_drift_m
    link_note = " (loopback: counted as the machine's)" if c.stack_includes_link else ""
    return [
        f"## Drift by cause (lap {c.last_lap} against lap 1)",
        "",
        "The Create 3 model replayed with the commands at their planned, send and arrival times "
        "(docs/analysis.md, 'Drift split into causes').",
        "",
        "| cause | drift it explains |",
        "| --- | --- |",
        f"| host emission timing (send vs plan) | {_mm(c.host_emission_m)} |",
        f"| link (arrival vs send){link_note} | {_mm(c.link_m)} |",
        f"| the rest: robot, model, mocap (measured vs arrival replay) | {_mm(c.rest_m)} |",
        *_base_rows(c.base),
        f"| the machine running the stack | {_mm(c.stack_m)} |",
        "",
        f"Replays: plan {_mm(replay['plan'])}, send {_mm(replay['send'])}, arrival {_mm(replay['arrival'])}; "
        f"measured {_mm(c.measured_drift_m)}.",
        "",
        *_stall_lines(c.segment_changes, c.phase_spread),
    ]


def _stall_lines(changes: SegmentChanges | None, spread: PhaseSpread | None) -> list[str]:
    """Which segment changes a link stall held, and the drift the same latencies give elsewhere."""
    if changes is None:
        return []
    stalled = changes.stalled
    named = ", ".join(f"seq {s.seq} {s.kind} +{s.excess_ms:.0f} ms" for s in stalled)
    out = [
        f"Segment changes (turn and side starts, the stop): {changes.count}, of which {len(stalled)} "
        f"arrived in a stall (more than {changes.stall_excess_ms:g} ms after the median latency of "
        f"{changes.median_latency_ms:.1f} ms){': ' + named if named else ''}; "
        f"{changes.stalled_commands_fraction * 100:.1f} % of all commands arrived in a stall. "
        f"Without the stalls that held a change, the arrival replay drifts {_mm(changes.drift_if_on_time_m)}.",
        "",
    ]
    if spread is not None:
        out += [
            f"The same latencies shifted against the plan ({spread.shifts} shifts) drift "
            f"{_mm(spread.median_m)} at the median (p10 {_mm(spread.p10_m)}, p90 {_mm(spread.p90_m)}): "
            "where a link stalls, one trial's drift depends on which changes its stalls hit.",
            "",
        ]
    return out


def _forwarding_lines(probe: dict) -> list[str]:
    """The router's or broker's own forwarding, from the probe's round trip through it on its node."""
    if not probe.get("samples"):
        return []
    if "rtt_p50_ms" not in probe:
        return [f"| router/broker forwarding | no probe sample came back ({probe['samples']} sent) |"]
    return [
        f"| router/broker forwarding (probe round trip on its node) | p50 {_ms(probe['rtt_p50_ms'])}, "
        f"p99 {_ms(probe['rtt_p99_ms'])}, max {_ms(probe['rtt_max_ms'])}; {probe['lost']} of {probe['samples']} lost |"
    ]


def _forwarder_lines(summary: dict) -> list[str]:
    """The emulated link's own lateness: how late its forwarder sent frames, per node and way."""
    out = []
    for node, directions in summary.items():
        if not isinstance(directions, dict):
            continue
        for direction, f in directions.items():
            if f.get("frames"):
                way = "uplink" if direction == "a2b" else "downlink"
                out.append(
                    f"| link emulator, {node} {way} ({f['frames']} frames) | late p50 {_ms(f['late_p50_ms'])}, "
                    f"p99 {_ms(f['late_p99_ms'])}, max {_ms(f['late_max_ms'])} |"
                )
    return out


def stack_lines(m: Metrics) -> list[str]:
    stack = m.stack
    if stack is None:
        return []
    out = ["## The stack's own timing faults", "", "| part | figure |", "| --- | --- |"]
    emission = stack.host_emission_late
    if emission is not None and emission.count:
        out.append(
            f"| host emission lateness | p50 {_ms(emission.p50_ms)}, p99 {_ms(emission.p99_ms)}, "
            f"max {_ms(emission.max_ms)} |"
        )
    robot = stack.robot or {}
    for key, title in (
        ("apply_late", "robot receive-to-apply"),
        ("step_late", "robot physics-step lateness"),
    ):
        s = robot.get(key) or {}
        if s.get("count"):
            out.append(
                f"| {title} | p50 {_ms(s['p50_ms'])}, p99 {_ms(s['p99_ms'])}, max {_ms(s['max_ms'])} |"
            )
    mocap = stack.mocap or {}
    if mocap.get("frames_generated"):
        out.append(
            f"| mocap emulator | {mocap['frames_skipped_late']} of {mocap['frames_generated']} frames skipped late |"
        )
    out += _forwarding_lines(stack.forwarding or {})
    out += _forwarder_lines(stack.link_forwarder or {})
    machine = stack.machine or {}
    if machine:
        pressure = machine.get("cpu_pressure_pct")
        out.append(
            f"| machine | steal {machine['steal_pct']:.1f} % (max {machine['steal_max_pct']:.0f} %), busy "
            f"{machine['busy_pct']:.0f} %, CPU pressure {'n/a' if pressure is None else f'{pressure:.0f} %'}, "
            f"reference timer late p99 {_ms(machine['timer_late_p99_ms'])} |"
        )
    err = stack.timing_error
    if err is not None and err.commands:
        share = err.machine_share
        out += [
            "",
            f"Commanded timing error (arrival - planned, about its median): RMS {err.total_rms_ms:.2f} ms, of which "
            f"host emission {err.host_emission_rms_ms:.2f} ms and path {err.path_rms_ms:.2f} ms; "
            f"from the machine: {'n/a' if share is None else f'{100 * share:.0f} %'}"
            + (" (loopback: the path is the machine's too)." if err.path_counted_as_machine else "."),
        ]
    return out + [""]


def _base_rows(base: RestSplit | None) -> list[str]:
    """The rest split by the robot's calibration (fieldtest.analysis.causes.restsplit), when it was given."""
    if base is None:
        return []
    cal = base.calibration
    where = f"E_d {cal.wheel_diameter_ratio:.5f}, E_b {cal.wheelbase_factor:.5f}"
    return [
        f"| of the rest, the base's calibration ({where}) | {_mm(base.systematic_m)} |",
        f"| of the rest, what is left (slip, floor, mocap) | {_mm(base.residual_m)} |",
    ]
