"""A newcomer's demo does not wait for the Zenoh bridge's first build (25-60 min): while it is not
built, the demo's Zenoh cases run on Zenoh's own path and the output says so and how to run them
bridged; once it is built they run bridged, as the lab does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fieldtest.middleware.zenoh.bridge import bridge_prefix, find_bridge
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner.cli import direct_where_no_bridge

MIDDLEWARES = ["dds", "zenoh-peer", "zenoh-router", "mqtt-local-broker"]
# The demo with a one-lap plan at 90 deg/s (the plan's length is not what is tested here)
DEMO_ONE_SHORT_LAP = (
    "import sys, fieldtest.runner.cli as cli; from fieldtest.plan import SquarePlan; "
    "cli.QUICK_PLAN = SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5); "
    "from fieldtest.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _requests() -> list[TrialRequest]:
    return [
        TrialRequest.model_validate({"name": f"{m}-none-loopback-r0", "transport": {"middleware": m}})
        for m in MIDDLEWARES
    ]


def test_without_the_bridge_only_the_bridged_cases_run_direct_and_the_note_says_how(tmp_path, monkeypatch):
    monkeypatch.setenv("FIELDTEST_CACHE", str(tmp_path / "empty-cache"))
    requests, note = direct_where_no_bridge(_requests())
    paths = {r.transport.middleware: r.transport.settings(ZenohSettings).path for r in requests}
    assert paths["zenoh-peer"] == paths["zenoh-router"] == "direct"
    assert "path" in requests[1].transport.settings(ZenohSettings).model_fields_set  # not defaulted back
    assert [r.name for r in requests] == [
        "dds-none-loopback-r0",
        "zenoh-peer-direct-none-loopback-r0",
        "zenoh-router-direct-none-loopback-r0",
        "mqtt-local-broker-none-loopback-r0",
    ]
    assert note.startswith("note: zenoh-peer, zenoh-router ran without the lab's bridges (the Zenoh bridge")
    assert "`make install`" in note and "--middlewares zenoh-peer,zenoh-router" in note


def test_with_the_bridge_built_nothing_changes():
    find_bridge()  # the suite's install builds it: a missing build fails here with how to build it
    requests = _requests()
    assert direct_where_no_bridge(requests) == (requests, "")


def cache_without_the_bridge(tmp_path: Path) -> Path:
    """The kit's cache with every build but the bridge's (the C helpers need not be built again)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in bridge_prefix().parent.iterdir():
        if not entry.name.startswith("zenoh-"):
            (cache / entry.name).symlink_to(entry)
    return cache


def test_the_demo_gives_its_verdict_with_no_bridge_built(tmp_path):
    middleware = "zenoh-router"  # its router runs on the direct path too
    out = tmp_path / "runs"
    env = {**os.environ, "FIELDTEST_CACHE": str(cache_without_the_bridge(tmp_path))}
    done = subprocess.run(
        [sys.executable, "-c", DEMO_ONE_SHORT_LAP, "demo", "--quick", "--middlewares", middleware]
        + ["--parallel", "1", "--rerun-invalid", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (trial_dir,) = [p for p in Path(out).iterdir() if (p / "trial.yaml").exists()]
    record = read_trial(trial_dir)
    assert record.outcome.end_reason == "completed", record.outcome.end_detail
    assert record.request.transport.settings(ZenohSettings).path == "direct"
    # said before the trials (stderr) and after the verdict (stdout), each in its tense
    assert f"note: {middleware} run without the lab's bridges" in done.stderr
    assert (
        "verdict:" in done.stdout
        and f"note: {middleware} ran without the lab's bridges" in done.stdout.split("verdict:")[-1]
    )
