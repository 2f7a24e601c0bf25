"""Each machine's clock sync state, saved in trial.yaml at a trial's start and end.

``chronyc -c tracking`` and ``chronyc -c sources`` (chrony, which docs/lab-guide.md section 4 sets
up on the laptop and the Pi) when chronyd answers; otherwise what systemd says about the clock
(``timedatectl show``: NTPSynchronized, e.g. under systemd-timesyncd); otherwise ``unknown`` with
the reason. The same script runs on the host (bash) and on the robot (over ssh).
"""

from __future__ import annotations

import subprocess
from typing import Any

# One section per source, each headed by a marker line; a missing tool leaves its section empty.
CLOCK_STATE_SCRIPT = (
    "echo '#tracking'; chronyc -n -c tracking 2>&1; "
    "echo '#sources'; chronyc -n -c sources 2>&1; "
    "echo '#timedatectl'; timedatectl show -p NTPSynchronized -p NTP 2>&1; true"
)
# chronyc -c tracking: the fields of `chronyc tracking`, in its order (chrony doc/chronyc.adoc)
TRACKING_FIELDS = (
    "reference_id",
    "reference",
    "stratum",
    "ref_time_s",
    "system_time_s",
    "last_offset_s",
    "rms_offset_s",
    "frequency_ppm",
    "residual_freq_ppm",
    "skew_ppm",
    "root_delay_s",
    "root_dispersion_s",
    "update_interval_s",
    "leap_status",
)
# chronyc -c sources: mode (^ server, = peer, # reference clock), state (* selected, + combined...)
SOURCE_FIELDS = (
    "mode",
    "state",
    "name",
    "stratum",
    "poll",
    "reach",
    "last_rx_s",
    "adjusted_offset_s",
    "measured_offset_s",
    "error_s",
)


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _sections(output: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("#") and line[1:] in ("tracking", "sources", "timedatectl"):
            current = line[1:]
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line.strip())
    return sections


def parse_clock_state(output: str) -> dict[str, Any]:
    """The state from ``CLOCK_STATE_SCRIPT``'s output: ``sync`` names what syncs the clock."""
    sections = _sections(output)
    tracking = [line.split(",") for line in sections.get("tracking", [])]
    if len(tracking) == 1 and len(tracking[0]) == len(TRACKING_FIELDS):
        sources = [
            dict(zip(SOURCE_FIELDS, map(_number, fields), strict=True))
            for fields in (line.split(",") for line in sections.get("sources", []))
            if len(fields) == len(SOURCE_FIELDS)
        ]
        state = dict(zip(TRACKING_FIELDS, map(_number, tracking[0]), strict=True))
        return {"sync": "chrony", "tracking": state, "sources": sources}
    chrony_said = " ".join(sections.get("tracking", [])) or "no output"
    systemd = dict(line.split("=", 1) for line in sections.get("timedatectl", []) if "=" in line)
    if "NTPSynchronized" in systemd:
        return {
            "sync": "systemd",
            "ntp_synchronized": systemd["NTPSynchronized"] == "yes",
            "ntp_service": systemd.get("NTP", ""),
            "why": f"chronyc: {chrony_said[:120]}",
        }
    timedatectl_said = " ".join(sections.get("timedatectl", [])) or "no output"
    return {"sync": "unknown", "why": f"chronyc: {chrony_said[:120]}; timedatectl: {timedatectl_said[:120]}"}


def local_clock_state(timeout_s: float = 10.0) -> dict[str, Any]:
    """This machine's clock sync state."""
    try:
        done = subprocess.run(
            ["bash", "-c", CLOCK_STATE_SCRIPT], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return {"sync": "unknown", "why": f"chronyc/timedatectl did not answer within {timeout_s:g} s"}
    return parse_clock_state(done.stdout)


def summary(state: dict[str, Any]) -> str:
    """One line for the console and the report."""
    if state.get("sync") == "chrony":
        t = state["tracking"]
        selected = next((s["name"] for s in state.get("sources", []) if s.get("state") == "*"), "none")
        return (
            f"chrony, reference {t['reference']} (stratum {t['stratum']}, selected source {selected}), "
            f"system time {1000 * float(t['system_time_s']):+.3f} ms, leap {t['leap_status']}"
        )
    if state.get("sync") == "systemd":
        return f"systemd: NTP synchronized {state.get('ntp_synchronized')} ({state.get('why')})"
    return f"unknown: {state.get('why')}"
