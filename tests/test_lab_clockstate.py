"""Each machine's clock sync state for trial.yaml: chrony's own CSV output (``chronyc -c``), systemd's
view, or unknown with the reason; and what this machine itself reports."""

from __future__ import annotations

import shutil

from fieldtest.labrun.orchestration.clockstate import (
    CLOCK_STATE_SCRIPT,
    local_clock_state,
    parse_clock_state,
    summary,
)

# `chronyc -c tracking` / `chronyc -c sources` on a Pi synced to the laptop (fields in the order of
# chronyc's tracking and sources reports, chrony doc/chronyc.adoc)
CHRONY = """#tracking
C0A8010A,192.168.1.10,4,1795610000.123456789,-0.000012345,0.000004321,0.000023456,-12.345,0.001,0.042,0.003456789,0.000123456,16.2,Normal
#sources
^,*,192.168.1.10,3,4,377,5,-0.000011000,-0.000011500,0.001234000
^,?,192.168.186.2,0,6,0,-,0.000000000,0.000000000,0.000000000
#timedatectl
NTP=no
NTPSynchronized=yes
"""


def test_chrony_tracking_and_sources_are_recorded_field_by_field():
    state = parse_clock_state(CHRONY)
    assert state["sync"] == "chrony"
    tracking = state["tracking"]
    assert (tracking["reference"], tracking["stratum"], tracking["leap_status"]) == (
        "192.168.1.10",
        4,
        "Normal",
    )
    assert tracking["system_time_s"] == -0.000012345 and tracking["rms_offset_s"] == 0.000023456
    assert [s["state"] for s in state["sources"]] == ["*", "?"]
    assert state["sources"][0]["reach"] == 377
    line = summary(state)
    assert "selected source 192.168.1.10" in line and "-0.012 ms" in line


def test_without_chrony_systemd_or_the_reason_is_recorded():
    no_chrony = "#tracking\n506 Cannot talk to daemon\n#sources\n506 Cannot talk to daemon\n#timedatectl\n"
    systemd = parse_clock_state(no_chrony + "NTP=yes\nNTPSynchronized=no\n")
    assert systemd["sync"] == "systemd" and systemd["ntp_synchronized"] is False
    assert "Cannot talk to daemon" in systemd["why"]
    unknown = parse_clock_state(no_chrony + "System has not been booted with systemd as init system\n")
    assert unknown["sync"] == "unknown"
    assert "Cannot talk to daemon" in unknown["why"] and "not been booted with systemd" in unknown["why"]
    assert summary(unknown).startswith("unknown: chronyc: 506")


def test_this_machine_reports_what_syncs_it_or_why_it_is_unknown():
    state = local_clock_state()
    assert state["sync"] in ("chrony", "systemd", "unknown")
    if not shutil.which("chronyc"):
        assert state["sync"] != "chrony" and "chronyc" in state["why"]
    assert "chronyc -n -c tracking" in CLOCK_STATE_SCRIPT and "chronyc -n -c sources" in CLOCK_STATE_SCRIPT
