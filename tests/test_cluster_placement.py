"""What a cluster campaign decides before and after Dask runs a trial (``fieldtest.runner.cluster``):
what each trial needs of a worker, which workers it may use, the kit version, and a shipped trial
entering the campaign whole or not at all. The cluster itself: tests/test_cluster.py."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from fieldtest.record import TrialRequest
from fieldtest.runner.cluster import (
    INCOMING,
    ClusterError,
    WorkerView,
    check_placement,
    task_resources,
    unpack_home,
)
from fieldtest.runner.clusterworker import KIT_DIR, kit_digest, kit_resource, kit_version, trial_needs
from fieldtest.trialcampaign import expand, parse_campaign

VERSION = "0.1.0+0123456789ab"


def _requests(body: dict) -> list[TrialRequest]:
    return expand(parse_campaign({"campaign": "c", **body}))


def _shipped(request: TrialRequest) -> TrialRequest:
    """The request as the worker reads it back."""
    return TrialRequest.model_validate_json(request.model_dump_json(exclude_unset=True))


def test_each_trial_needs_what_its_network_and_middleware_run_on():
    loopback, ethernet, air = _requests({"matrix": {"network": ["loopback", "ethernet", "wifi-80211"]}})
    assert trial_needs(loopback) == []
    assert trial_needs(ethernet) == ["root", "netns"]
    assert trial_needs(air) == ["root", "netns", "ns3"]
    (zenoh,) = _requests({"matrix": {"middleware": ["zenoh-peer"]}})
    (direct,) = _requests(
        {"base": {"transport": {"zenoh_path": "direct"}}, "matrix": {"middleware": ["zenoh-peer"]}}
    )
    assert trial_needs(zenoh) == ["zenoh-bridge"]  # a twin's Zenoh trial takes the bridged path by default
    assert trial_needs(direct) == []


def test_a_request_reaches_the_worker_with_only_the_fields_the_campaign_set():
    """On the worker, unset fields still get the twin's defaults (a Zenoh trial its bridges), as here."""
    (zenoh,) = _requests({"matrix": {"middleware": ["zenoh-peer"]}})
    back = _shipped(zenoh)
    assert back == zenoh
    assert "zenoh_path" not in back.transport.model_fields_set
    assert trial_needs(back) == trial_needs(zenoh)


def _worker(name: str, capabilities: list[str], version: str = VERSION) -> WorkerView:
    resources = {"trial": 1.0, kit_resource(version): 1.0, **{c: 1.0 for c in capabilities}}
    return WorkerView(f"tcp://10.0.0.{len(name)}:8788", name, resources)


def test_a_trial_goes_only_to_a_worker_of_this_kit_with_what_it_needs():
    loopback, ethernet = _requests({"matrix": {"network": ["loopback", "ethernet"]}})
    netns = _worker("a", ["root", "netns"])
    plain = _worker("b", [])
    other = _worker("c", ["root", "netns"], "0.1.0+ffffffffffff")
    assert task_resources(ethernet, VERSION) == {"trial": 1, "kit-0123456789ab": 1, "root": 1, "netns": 1}
    assert netns.can_run(task_resources(ethernet, VERSION)) and not plain.can_run(
        task_resources(ethernet, VERSION)
    )
    assert not other.can_run(task_resources(ethernet, VERSION)) and not other.can_run(
        task_resources(loopback, VERSION)
    )
    lines = check_placement([loopback, ethernet], [netns, plain, other], VERSION)
    assert lines == [
        "worker c: another kit (ffffffffffff, this machine's 0123456789ab): refused, it gets no trials "
        "(install this kit there)"
    ]
    with pytest.raises(ClusterError, match=r"no worker of this kit can run c-ethernet-r0 \(needs root, netns\); "
                       r"workers: b: none; c: root, netns"):  # fmt: skip
        check_placement([loopback, ethernet], [plain, other], VERSION)


def test_the_kit_version_changes_with_any_edit_of_the_kits_files(tmp_path):
    copy = tmp_path / "fieldtest"
    shutil.copytree(KIT_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert kit_digest(copy) == kit_version().split("+")[1]
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "stale.pyc").write_bytes(b"compiled elsewhere")
    assert kit_digest(copy) == kit_digest(KIT_DIR)  # byte-code is not the kit
    with (copy / "runner" / "verdict.py").open("a") as edited:
        edited.write("# edited on one machine\n")
    assert kit_digest(copy) != kit_digest(KIT_DIR)


def _archive(trial_dir: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(trial_dir, arcname=trial_dir.name)
    return buffer.getvalue()


def _trial(folder: Path, trial_id: str) -> Path:
    trial = folder / trial_id
    (trial / "analysis").mkdir(parents=True)
    (trial / "trial.yaml").write_text("format_version: 1\n")
    (trial / "analysis" / "metrics.json").write_text("{}" + " " * 200_000)
    return trial


def test_a_shipped_trial_enters_the_campaign_whole(tmp_path):
    archive = _archive(_trial(tmp_path / "worker", "20260101-000000-c-r0"))
    out = tmp_path / "campaign"
    out.mkdir()
    trial = unpack_home(archive, "20260101-000000-c-r0", out)
    assert trial == out / "20260101-000000-c-r0"
    assert (trial / "analysis" / "metrics.json").stat().st_size == 200_002
    assert sorted(p.name for p in out.iterdir()) == ["20260101-000000-c-r0"]


def test_a_cut_off_archive_leaves_nothing_in_the_campaign(tmp_path):
    archive = _archive(_trial(tmp_path / "worker", "20260101-000000-c-r0"))
    out = tmp_path / "campaign"
    out.mkdir()
    with pytest.raises(tarfile.TarError):
        unpack_home(archive[: len(archive) // 2], "20260101-000000-c-r0", out)
    assert list(out.iterdir()) == []  # neither the trial nor the unpacking folder
    with pytest.raises(ClusterError, match="holds no trial.yaml"):
        unpack_home(_archive(tmp_path / "worker" / "20260101-000000-c-r0" / "analysis"), "analysis", out)
    assert not (out / "analysis").exists() and not (out / INCOMING).exists()
