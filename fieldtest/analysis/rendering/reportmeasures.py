"""Sections of the trial report beyond the basics: command timing classes and the measured link."""

from __future__ import annotations

from typing import Any

from fieldtest.analysis.metrics.schema import Metrics


def _pct(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction * 100:.2f} %"


def lateness_lines(m: Metrics) -> list[str]:
    """Commands sent in ros2-performance's classes (late, too late, lost) against the command period."""
    c = m.latency.lateness
    if c is None:
        return []
    rows = (
        ("on time", f"<= {c.late_threshold_ms:g} ms", c.on_time, c.on_time_fraction),
        ("late", f"> {c.late_threshold_ms:g} ms", c.late, c.late_fraction),
        ("too late", f"> {c.too_late_threshold_ms:g} ms", c.too_late, c.too_late_fraction),
        ("lost", "never arrived", c.lost, c.lost_fraction),
    )
    out = [
        f"Command timing in classes (iRobot ros2-performance's, against the command period of "
        f"{c.period_ms:g} ms): late above min(20 % of the period, 5 ms), too late above "
        f"min(the period, 50 ms); {c.commands} commands sent.",
        "",
        "| class | one-way latency | commands | share |",
        "| --- | --- | --- | --- |",
    ]
    out += [f"| {name} | {rule} | {n} | {_pct(share)} |" for name, rule, n, share in rows]
    return out + [""]


def _ms(value: object) -> str | None:
    return f"{value:.2f} ms" if isinstance(value, int | float) and value == value else None


def link_line(link: dict[str, Any]) -> str:
    """The link measured before the trial as one readable sentence (not the raw record)."""
    given = link.get("description")
    description: dict[str, Any] = given if isinstance(given, dict) else {}
    profile = description.get("profile") or link.get("profile")
    name = profile.get("name") if isinstance(profile, dict) else profile
    parts = []
    if name:
        backend = description.get("backend")
        parts.append(f"profile {name}" + (f" ({backend})" if backend else ""))
    rtt = _ms(link.get("rtt_median_ms"))
    if rtt:
        p99 = _ms(link.get("rtt_p99_ms"))
        parts.append(f"round trip median {rtt}" + (f", p99 {p99}" if p99 else ""))
    for key, label in (("owd_ab_median_ms", "one way there"), ("owd_ba_median_ms", "one way back")):
        if value := _ms(link.get(key)):
            parts.append(f"{label} median {value}")
    if isinstance(link.get("loss"), int | float):
        parts.append(f"loss {_pct(link['loss'])}")
    if link.get("sent") is not None:
        probe = link.get("probe", "probe")
        route = f" {link['from']} -> {link['to']}" if link.get("from") and link.get("to") else ""
        parts.append(f"{link['sent']} {probe} probes{route}")
    return "Measured link before the trial: " + ("; ".join(parts) or "no figures") + "."


def _mm(stats: dict[str, float] | None, key: str) -> str:
    return "n/a" if not stats else f"{stats[key] * 1000:.2f} mm"


def _num(stats: dict[str, float] | None, key: str, unit: str, digits: int = 3) -> str:
    return "n/a" if not stats else f"{stats[key]:.{digits}f} {unit}"


def relative_lines(m: Metrics) -> list[str]:
    """Relative error per side, lap, 2 and 4 laps (evo's RPE against the ideal square)."""
    r = m.relative
    if r is None:
        return []
    out = ["## Relative error (RPE against the ideal square)", ""]
    if not r.available:
        return out + [f"Not available: {r.reason or 'n/a'}.", ""]
    if r.rel_delta_tol is None or r.pose_step_s is None:
        return out + ["Not available: metrics.json lacks the pairing tolerance and pose step.", ""]
    out += [
        f"RPE as {r.tool} computes it, over all pose pairs whose path on the ideal square is the distance apart "
        f"(within {r.rel_delta_tol * 100:g} %), poses every {r.pose_step_s * 1000:g} ms: translation and "
        "rotation of each pair's error pose; per metre: divided by the distance (as rpg_trajectory_evaluation "
        "gives relative error against distance travelled).",
        "",
        "| distance | pairs | translation RMSE | mean | max | mean, % of distance | rotation mean | max | mean per metre |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in r.distances:
        label = f"{d.name} ({d.distance_m:.2f} m)"
        if not d.available:
            out.append(f"| {label} | n/a: {d.reason} | | | | | | | |")
            continue
        t, rot = d.translation_m, d.rotation_deg
        out.append(
            f"| {label} | {d.pairs} | {_mm(t, 'rmse')} | {_mm(t, 'mean')} | {_mm(t, 'max')} | "
            f"{_num(d.translation_pct, 'mean', '%')} | {_num(rot, 'mean', 'deg')} | {_num(rot, 'max', 'deg')} | "
            f"{_num(d.rotation_deg_per_m, 'mean', 'deg/m')} |"
        )
    return out + [""]


def base_lines(m: Metrics) -> list[str]:
    """What the base received against what the host sent (fieldtest.analysis.metrics.basereceived)."""
    b = m.base
    if b is None:
        return []
    out = ["## What the base received", ""]
    if not b.available:
        instead = f" Instead: {b.instead}." if b.instead else ""
        return out + [f"Not available: {b.reason or 'n/a'}.{instead}", ""]
    late = b.lateness_ms
    rows = [
        ("source", b.source),
        ("sent by the host / received by the base", f"{b.sent} / {b.received}"),
        ("message types the base received", ", ".join(b.received_types) or "none"),
        ("matched by", b.matched_by),
        ("missing", _na_count(b.missing)),
        ("reordered", _na_count(b.reordered)),
        ("duplicates", _na_count(b.duplicates)),
        ("values changed / zeroed", f"{b.values_changed} / {b.zeroed}"),
        (
            "lateness (send to base)",
            "n/a"
            if not late
            else f"median {late.median:.1f} ms, p99 {late.p99:.1f} ms, max {late.max:.1f} ms",
        ),
    ]
    out += ["| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows] + [""]
    return out + [f"**Warning:** {w}" for w in b.warnings] + ([""] if b.warnings else [])


def _na_count(value: int | None) -> str:
    return "n/a" if value is None else str(value)
