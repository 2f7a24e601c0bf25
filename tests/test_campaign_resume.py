"""``fieldtest campaign --resume``: which records a campaign keeps, and the run that keeps them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from fieldtest.analysis.pipeline import analyze_trial
from fieldtest.record import TrialRequest
from fieldtest.record.trial import read_trial, write_trial
from fieldtest.runner.cli import campaign_main
from fieldtest.runner.resume import kept_trials
from fieldtest.runner.twintrial import _assign_ports, _with_twin_defaults
from fieldtest.testkit.synth import SynthSpec, synthesize
from fieldtest.trialcampaign import load_trials

CAMPAIGN = """\
campaign: resumed
base:
  plan: {laps: 2, side_duration_s: 1.0, start_delay_s: 0.5}
matrix:
  middleware: [dds, zenoh-peer]
  network: [ethernet]
repetitions: 2
"""


def _as_the_runner_placed(request: TrialRequest, domain_id: int) -> TrialRequest:
    """The request as a twin trial records it: ports, domain and namespace addresses of its own."""
    placed = _assign_ports(_with_twin_defaults(request), domain_id)
    transport = placed.transport.model_copy(
        update={"host_address": "10.77.0.1", "robot_address": "10.77.0.2", "wifi_roles": ("host",)}
    )
    twin = placed.twin.model_copy(update={"natnet_address": "10.77.0.3", "truth_socket": "/tmp/t.sock"})
    return placed.model_copy(update={"transport": transport, "twin": twin})


def _record(folder: Path, request: TrialRequest, stamp: str, analyzed: bool = True, **spec) -> Path:
    """A synthetic trial of ``request`` under ``folder`` (analyzed, unless not ``analyzed``)."""
    trial_dir = folder / f"{stamp}-{request.name}"
    fields = {"plan": request.plan, "middleware": request.transport.middleware, "truth_from_commands": True}
    synthesize(trial_dir, SynthSpec(name=request.name, seed=request.seed, **{**fields, **spec}))
    record = read_trial(trial_dir)
    write_trial(trial_dir, record.model_copy(update={"request": _as_the_runner_placed(request, 7)}))
    if analyzed:
        analyze_trial(trial_dir, plots=False)
    return trial_dir


@pytest.fixture
def campaign(tmp_path):
    path = tmp_path / "resumed.yaml"
    path.write_text(CAMPAIGN)
    _, requests = load_trials(path)
    assert [r.name for r in requests] == [
        "resumed-dds-ethernet-r0", "resumed-zenoh-peer-ethernet-r0",
        "resumed-dds-ethernet-r1", "resumed-zenoh-peer-ethernet-r1",
    ]  # fmt: skip
    return path, requests, tmp_path / "runs" / "resumed"


def test_only_completed_valid_records_of_the_same_trial_are_kept(campaign):
    _, requests, folder = campaign
    dds0, zenoh0, dds1, zenoh1 = requests
    kept_dds0 = _record(folder, dds0, "20260101-000001")
    _record(folder, dds0, "20260101-000000")  # older: the newer one is kept
    late = ((dds1.plan.lap_start_s(1), dds1.plan.total_s + 5, 0.02),)  # the host 20 ms late: invalid
    _record(folder, dds1, "20260101-000002", send_late=late)
    _record(folder, zenoh0, "20260101-000003", analyzed=False)
    _record(folder, zenoh1, "20260101-000004", end_reason="host-stopped")
    other_plan = zenoh1.model_copy(update={"plan": zenoh1.plan.model_copy(update={"laps": 3})})
    _record(folder, other_plan, "20260101-000005")  # same name, another trial

    left, kept = kept_trials(requests, folder)

    assert [k.trial_dir for k in kept] == [kept_dds0]
    assert kept[0].request == dds0 and kept[0].metrics.stack.valid
    assert left == [zenoh0, dds1, zenoh1]


def test_a_campaign_whose_every_trial_is_kept_runs_none_and_compares_them_all(campaign, capfd):
    path, requests, folder = campaign
    for i, request in enumerate(requests):
        _record(folder, request, f"20260101-00000{i}")

    code = campaign_main([str(path), "--out", str(folder.parent), "--resume"])

    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert f"resume: 4 of 4 trials kept from {folder}, 0 to run" in err
    assert "4/4 trials completed" in out and "verdict: VALID" in out
    compared = (folder / "compare" / "compare.md").read_text()
    assert all(f"| {mw} | none | ethernet | 2 |" in compared for mw in ("dds", "zenoh-peer")), compared
