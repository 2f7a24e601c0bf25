"""Topology as a trial field: which of host, robot and router/broker sit on the emulated link
(real namespaces and link emulator; delays measured with the kit's UDP probe on the shared clock)."""

from __future__ import annotations

import numpy as np
import pytest

from fieldtest.machine import MachineMonitor, describe
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.netem import get_profile, measure_link, profiles
from fieldtest.netem.disturbance import probe_allowance
from fieldtest.netem.placement import wireless_nodes
from fieldtest.plan import SquarePlan
from fieldtest.record import RECEIPTS_TOPIC, TrialRequest, read_bag, read_trial
from fieldtest.runner.twintrial import _Network, run_twin_trial
from fieldtest.testkit import needs

LEG_MS = 10.0  # one way, each emulated leg; no jitter, so a leg shows as its delay
# what the probe's own Python processes and the forwarder may add to the fastest round trip; the
# fastest of several, since a busy machine delays some (the bounds check placement, not speed); what
# the machine adds beyond that is measured over the same probe (_rtt_ms)
PROBE_MS = 3.0


@pytest.fixture
def legs(monkeypatch):
    """Two test profiles: a Wi-Fi-like leg and a cellular one (each machine on its own modem)."""
    leg = {"description": "test leg", "source": "test", "delay_ms": LEG_MS}
    monkeypatch.setitem(profiles.BUILTIN, "leg", leg)
    monkeypatch.setitem(profiles.BUILTIN, "cell", {**leg, "cellular": True})


def _rtt_ms(topo, a: str, b: str) -> tuple[float, float, str]:
    """The fastest of 20 round trips a -> b, and what the machine may have added to it: each
    forwarder that carried frames meanwhile (the probes' path, and any other frames: its lateness
    p90 both ways) and the two endpoints' wake-ups, all measured over the same probe
    (fieldtest.netem.disturbance; the median's bound holds the minimum)."""
    topo.reset_link_stats()
    with MachineMonitor() as machine:
        rtt = measure_link(topo, a, b, count=20)["rtt_min_ms"]
    report, wake_ms = machine.report(), machine.report()["timer_late_p90_ms"]
    crossed = [f for f in topo.link_stats().values() if f["a2b"]["tx"] + f["b2a"]["tx"] > 0]
    forwarders_ms = sum(probe_allowance(report, f).rtt_ms - 2 * wake_ms for f in crossed)
    return rtt, forwarders_ms + 2 * wake_ms, f"{len(crossed)} forwarders carried frames; {describe(report)}"


@pytest.mark.parametrize(
    ("network", "topology", "legs_to_broker", "legs_to_robot"),
    [
        ("leg", "seed", 1, 2),  # host and robot stations of one access point, broker wired
        ("cell", "seed", 2, 2),  # the seed's 4G: the broker on a cellular leg of its own too
        ("leg", "robot-only", 0, 1),
        ("leg", "all", 2, 2),
        ("leg", ["robot", "broker"], 1, 1),
    ],
)
def test_each_machine_sits_where_the_topology_says(legs, network, topology, legs_to_broker, legs_to_robot):
    needs.netns()
    request = TrialRequest(network=network, topology=topology, transport={"middleware": "mqtt-broker"})
    net = _Network(request)
    try:
        placement = net.placement()
        wireless = sorted(n for n, link in placement.items() if link == network)
        assert wireless == sorted(wireless_nodes(topology, get_profile(network), "broker"))
        assert placement["mocap"].startswith("wired")  # the ground-truth PC stays on the wire
        (to_broker, broker_ms, broker_why), (to_robot, robot_ms, robot_why) = (
            _rtt_ms(net.topo, "host", "broker"),
            _rtt_ms(net.topo, "host", "robot"),
        )
    finally:
        net.close()
    assert 2 * LEG_MS * legs_to_broker <= to_broker < 2 * LEG_MS * legs_to_broker + PROBE_MS + broker_ms, (
        broker_why
    )
    assert 2 * LEG_MS * legs_to_robot <= to_robot < 2 * LEG_MS * legs_to_robot + PROBE_MS + robot_ms, (
        robot_why
    )


def test_seed_topology_is_the_default_honoured_and_recorded_in_a_trial(legs, tmp_path):
    """host -> broker -> robot with host and robot each on a leg and the broker wired: every
    command crosses two legs, which the robot's latency (shared clock) and the record show."""
    needs.netns()
    request = TrialRequest(
        name="topology-seed",
        plan=SquarePlan(side_duration_s=1.0, turn_rate_dps=90.0, laps=1, start_delay_s=0.5),
        network="leg",
        transport={"middleware": "mqtt-broker", "mqtt_nagle": False},  # the legs alone, no Nagle wait
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    text = (result.trial_dir / "trial.yaml").read_text()
    assert "topology: seed" in text
    record = read_trial(result.trial_dir)
    nodes = record.outcome.nodes
    assert nodes["host"] == nodes["robot"] == "leg" and nodes["broker"].startswith("wired")
    link = record.outcome.link
    assert 2 * LEG_MS <= link["host_to_broker"]["rtt_min_ms"] < 2 * LEG_MS + PROBE_MS
    assert 4 * LEG_MS <= link["rtt_min_ms"] < 4 * LEG_MS + PROBE_MS
    receipts = [m for _, m in read_bag(result.trial_dir / "robot").messages(RECEIPTS_TOPIC)]
    one_way_ms = np.array(
        [(r.received.sec - r.sent.sec) * 1e3 + (r.received.nanosec - r.sent.nanosec) / 1e6 for r in receipts]
    )
    assert 2 * LEG_MS <= one_way_ms.min() and np.percentile(one_way_ms, 10) < 2 * LEG_MS + PROBE_MS


def test_topology_is_a_campaign_axis():
    from fieldtest.trialcampaign import expand, parse_campaign

    campaign = parse_campaign(
        {
            "campaign": "topo",
            "base": {"network": "wifi"},
            "matrix": {"topology": ["seed", "robot-only", ["host", "robot", "broker"]]},
        }
    )
    trials = expand(campaign)
    assert [t.topology for t in trials] == ["seed", "robot-only", ["host", "robot", "broker"]]
    assert [t.name for t in trials] == ["topo-seed-r0", "topo-robot-only-r0", "topo-host+robot+broker-r0"]
    with pytest.raises(ValueError, match="topology"):
        expand(parse_campaign({"campaign": "bad", "matrix": {"topology": [["host", "mocap"]]}}))


def test_trial_command_line_takes_topology_and_nagle():
    import argparse

    from fieldtest.runner.cli import add_common_args, request_from_args

    parser = argparse.ArgumentParser()
    add_common_args(parser)
    default = request_from_args(parser.parse_args([]), "mqtt-broker")
    assert default.topology == "seed" and default.transport.settings(MqttSettings).nagle is True
    chosen = request_from_args(parser.parse_args(["--topology", "robot-only", "--no-nagle"]), "mqtt-broker")
    assert chosen.topology == "robot-only" and chosen.transport.settings(MqttSettings).nagle is False
