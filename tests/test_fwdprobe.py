"""The forwarding probe measures the router or broker itself: every sample crosses it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.procs import free_port
from fieldtest.twin.fwdprobe import ForwardProbe, forward_summary, probe_config

PROBED = [name for name in registry.names() if registry.get(name).infra_process is not None]


def _probe_for(probe: ForwardProbe, seconds: float, rate_hz: float = 20.0) -> None:
    stop = threading.Event()
    runner = threading.Thread(target=probe.run, args=(rate_hz, stop))
    runner.start()
    time.sleep(seconds)
    stop.set()
    runner.join()


@pytest.mark.parametrize("middleware", PROBED)
def test_every_sample_crosses_the_router_or_broker_and_is_lost_when_it_stops(tmp_path, middleware):
    config = TransportConfig(middleware=middleware, zenoh_port=free_port(), mqtt_port=free_port())
    infra = registry.infrastructure(config, tmp_path)
    with infra:
        probe = ForwardProbe(probe_config(config))
        try:
            assert probe.wait_for_route(timeout_s=10.0)
            _probe_for(probe, 1.5)
            through = probe.summary()
            infra.stop()  # a probe that bypassed the infrastructure would go on receiving
            _probe_for(probe, 1.0)
            after = probe.summary()
        finally:
            probe.close()
    assert through["samples"] >= 20 and through["lost"] == 0, through
    assert 0 < through["rtt_p50_ms"] <= through["rtt_p99_ms"] <= through["rtt_max_ms"], through
    assert after["lost"] >= 15, after


@pytest.mark.parametrize("rtt_ms", [np.full(50, 0.8), np.linspace(0.3, 12.0, 400), np.array([2.5])])
def test_summary_counts_losses_and_orders_the_percentiles(rtt_ms):
    out = forward_summary(len(rtt_ms) + 3, rtt_ms)
    assert out["samples"] == len(rtt_ms) + 3 and out["lost"] == 3
    assert out["rtt_p50_ms"] == pytest.approx(float(np.median(rtt_ms)))
    assert out["rtt_p50_ms"] <= out["rtt_p90_ms"] <= out["rtt_p99_ms"] <= out["rtt_max_ms"] == rtt_ms.max()


def test_no_samples_no_figures():
    assert forward_summary(7, np.array([])) == {"samples": 7, "lost": 7}


def test_the_probe_has_its_own_namespace_and_skips_the_bridges():
    config = TransportConfig(middleware="zenoh-router", namespace="/tb4", zenoh_path="bridge")
    probed = probe_config(config)
    assert probed.namespace != config.namespace and probed.settings(ZenohSettings).path == "direct"
    assert (
        probed.router_address == config.router_address
        and probed.settings(ZenohSettings).port == config.settings(ZenohSettings).port
    )


def test_the_probe_measures_the_broker_not_its_clients_nagle_wait():
    probed = probe_config(TransportConfig(middleware="mqtt-broker"))  # the trial's clients keep Nagle
    assert probed.settings(MqttSettings).nagle is False
