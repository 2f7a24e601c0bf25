"""MQTT as mqtt_client: Nagle's algorithm on the kit's MQTT clients by default (Paho C sets no
TCP_NODELAY), TCP_NODELAY as the named variant; real Mosquitto, real paho sockets."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fieldtest.middleware.mqtt.infra import MosquittoBroker
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.mqtt.transport import open_mqtt
from fieldtest.netem import Topology
from fieldtest.procs import free_port
from fieldtest.testkit import needs
from fieldtest.transport import TransportConfig

HERE = Path(__file__).parent
LINK_DELAY_MS = 20.0  # one way, on the publisher's link: an unacknowledged segment waits 2 x this


def _config(nagle: bool | None, **kw) -> TransportConfig:
    fields = {} if nagle is None else {"mqtt_nagle": nagle}
    return TransportConfig(middleware="mqtt-local-broker", mqtt_port=free_port(), **fields, **kw)


@pytest.mark.parametrize(("nagle", "nodelay"), [(None, False), (True, False), (False, True)])
@pytest.mark.parametrize("role", ["host", "robot"])
def test_client_socket_has_nagle_unless_the_variant_turns_it_off(tmp_path, nagle, nodelay, role):
    config = _config(nagle)
    with MosquittoBroker(config, tmp_path):
        transport = open_mqtt(config, role)
        try:
            sock = transport.client.socket()
            assert bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)) is nodelay
        finally:
            transport.close()


def _burst_spreads(
    tmp_path: Path, nagle: bool, bursts: int = 6, size: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """Per burst, ms, at a subscriber on the broker's node, for a publisher on a link with
    LINK_DELAY_MS each way: last arrival minus first, and the largest one-way delay (send stamp to
    arrival) minus the smallest. The second leaves out how late the publisher itself wrote each
    message, which a loaded machine stretches and TCP does not."""
    profile = {"name": "delay", "delay_ms": LINK_DELAY_MS}
    with Topology(profile, nodes=["host", "broker"], wireless=["host"]) as topo:
        config = TransportConfig(
            middleware="mqtt-broker",
            broker_address=topo.address("broker"),
            mqtt_port=free_port(),
            mqtt_nagle=nagle,
        )
        env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"}
        script = [sys.executable, str(HERE / "mqtt_burst.py")]
        pipe = subprocess.PIPE
        with MosquittoBroker(config, tmp_path / f"broker-{nagle}", prefix=topo.command("broker", [])):
            sub = topo.run(
                "broker",
                [
                    *script,
                    "sub",
                    config.broker_address,
                    str(config.settings(MqttSettings).port),
                    "--count",
                    str(bursts * size),
                ],
                env=env,
                stdout=pipe,
                stderr=pipe,
                text=True,
            )
            assert sub.stdout.readline().strip() == "READY", sub.stderr.read()
            pub = topo.run(
                "host",
                [*script, "pub", config.model_dump_json(), "--bursts", str(bursts), "--size", str(size)],
                env=env,
                stderr=pipe,
                text=True,
            )
            _, pub_err = pub.communicate(timeout=60)
            assert pub.returncode == 0, pub_err
            out, err = sub.communicate(timeout=60)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(rows) == bursts * size, err
    by_burst: dict[int, list[dict]] = {}
    for row in rows:
        by_burst.setdefault(row["burst"], []).append(row)
    arrivals = [[row["arrival_ns"] for row in burst] for burst in by_burst.values()]
    delays = [[row["arrival_ns"] - row["sent_ns"] for row in burst] for burst in by_burst.values()]
    return (
        np.array([(max(a) - min(a)) / 1e6 for a in arrivals]),
        np.array([(max(d) - min(d)) / 1e6 for d in delays]),
    )


def test_nagle_holds_small_writes_behind_an_unacknowledged_segment(tmp_path):
    """With Nagle (the default, as Paho C) the first message of a burst leaves at once and the rest
    wait for its acknowledgement, a round trip of the link later, then leave together; with
    TCP_NODELAY every message leaves at once. Lower bound from the configured link, not speed."""
    needs.netns()
    round_trip_ms = 2 * LINK_DELAY_MS
    with_nagle, _ = _burst_spreads(tmp_path, nagle=True)
    _, without = _burst_spreads(tmp_path, nagle=False)
    # held a round trip: arrivals spread at least that, however late the publisher wrote
    assert np.median(with_nagle) >= round_trip_ms - 1.0, with_nagle
    # nothing held: each message as quick as the others, however late the publisher wrote it
    assert np.median(without) < LINK_DELAY_MS, without


def test_the_variant_is_named_in_the_record_the_report_and_compare(tmp_path):
    from fieldtest.analysis import compare_trials, read_metrics
    from fieldtest.analysis.pipeline import analyze_trial
    from fieldtest.record import read_trial, write_trial
    from fieldtest.testkit.synth import SynthSpec, synthesize
    from fieldtest.trialcampaign import expand, parse_campaign

    campaign = parse_campaign(
        {"campaign": "nagle", "matrix": {"middleware": ["mqtt-broker"], "mqtt_nagle": [True, False]}}
    )
    assert [t.transport.settings(MqttSettings).nagle for t in expand(campaign)] == [True, False]

    for nagle in (True, False):
        trial = tmp_path / f"nagle-{nagle}"
        synthesize(trial, SynthSpec(middleware="mqtt-broker", name=f"nagle-{nagle}"))
        record = read_trial(trial)
        record.request.transport = record.request.transport.with_settings(MqttSettings, nagle=nagle)
        write_trial(trial, record)
        assert f"nagle: {str(nagle).lower()}" in (trial / "trial.yaml").read_text()
        analyze_trial(trial, plots=False)
        metrics = read_metrics(trial / "analysis" / "metrics.json")
        assert metrics.trial.mqtt_nagle is nagle
        report = (trial / "analysis" / "report.md").read_text()
        assert ("MQTT clients with Nagle's algorithm" in report) is nagle
        assert ("MQTT clients without Nagle's algorithm (TCP_NODELAY)" in report) is not nagle
    rows = compare_trials([tmp_path], tmp_path / "compare")["rows"]
    assert [r["middleware"] for r in rows] == ["mqtt-broker", "mqtt-broker (Nagle off)"]
