"""Each family's link settings live in its package (fieldtest/middleware/<family>/settings.py) and
``TransportConfig`` writes them under the family's name; trial records and campaign files written
with the older flat keys (``zenoh_path``, ``mqtt_port``, ...) still load as the same settings."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from fieldtest.linkconfig import SETTINGS_MODELS, TransportConfig
from fieldtest.middleware.dds.settings import Settings as DdsSettings
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.middleware.zenoh.settings import Settings as ZenohSettings
from fieldtest.record.recordnames import TRIAL_FILE
from fieldtest.record.trial import read_trial
from fieldtest.testkit.synth import SynthSpec, synthesize
from fieldtest.trialcampaign import expand, parse_campaign

# A transport block as trial.yaml held it before the families held their settings (flat keys).
FLAT_TRANSPORT = """\
middleware: zenoh-router
qos: default
namespace: /tb4
domain_id: 3
host_address: 10.0.0.1
robot_address: 10.0.0.2
router_address: 10.0.0.3
broker_address: 127.0.0.1
zenoh_port: 7500
zenoh_path: bridge
zenoh_express: true
mqtt_port: 1999
mqtt_nagle: false
dds_discovery: none
security: none
keystore: ''
"""
NESTED = {
    "dds": {"discovery": "none", "robot_vendor": "same"},
    "zenoh": {"port": 7500, "path": "bridge", "express": True},
    "mqtt": {"port": 1999, "nagle": False},
}


def test_the_flat_keys_of_older_configs_read_as_the_families_settings():
    config = TransportConfig.model_validate(yaml.safe_load(FLAT_TRANSPORT))
    assert config.settings(ZenohSettings) == ZenohSettings(port=7500, path="bridge", express=True)
    assert config.settings(MqttSettings) == MqttSettings(port=1999, nagle=False)
    assert config.settings(DdsSettings) == DdsSettings(discovery="none")
    assert config == TransportConfig.model_validate({**yaml.safe_load(FLAT_TRANSPORT), **NESTED})


def test_a_config_is_written_with_each_familys_settings_under_its_name():
    config = TransportConfig.model_validate(yaml.safe_load(FLAT_TRANSPORT))
    written = config.model_dump(mode="json")
    assert {name: written[name] for name in NESTED} == NESTED
    flat = {
        "zenoh_port",
        "zenoh_path",
        "zenoh_express",
        "mqtt_port",
        "mqtt_nagle",
        "dds_discovery",
        "families",
    }
    assert not flat & set(written)
    assert TransportConfig.model_validate(written) == config
    assert TransportConfig.model_validate_json(config.model_dump_json()) == config


def test_a_trial_record_written_with_the_flat_keys_still_loads(tmp_path):
    trial = tmp_path / "trial"
    synthesize(trial, SynthSpec(middleware="mqtt-broker", name="old-record"))
    path = trial / TRIAL_FILE
    data = yaml.safe_load(path.read_text())
    transport = data["request"]["transport"]
    for family in NESTED:
        for field, value in transport.pop(family).items():
            transport[f"{family}_{field}"] = value
    transport["mqtt_nagle"] = False
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert "mqtt_nagle: false" in path.read_text() and "\nmqtt:" not in path.read_text()
    record = read_trial(trial)
    assert record.request.transport.settings(MqttSettings).nagle is False
    assert record.request.transport.own_settings(MqttSettings) == MqttSettings(nagle=False)
    assert record.request.transport.own_settings(ZenohSettings) is None  # not the trial's family


def test_a_campaign_axis_names_a_family_setting_by_its_flat_name():
    campaign = parse_campaign(
        {"campaign": "c", "base": {"transport": {"zenoh": {"path": "direct"}}},
         "matrix": {"middleware": ["zenoh-peer"], "zenoh_express": [False, True], "zenoh_port": [7500]}}
    )  # fmt: skip
    settings = [t.transport.settings(ZenohSettings) for t in expand(campaign)]
    assert settings == [ZenohSettings(port=7500, path="direct", express=e) for e in (False, True)]


@pytest.mark.parametrize(
    "transport, where",
    [
        ({"zenoh": {"pth": "bridge"}}, "zenoh.pth"),
        ({"mqtt_port": "many"}, "mqtt.port"),
        ({"quic_port": 1}, "quic_port"),
    ],
)
def test_a_wrong_family_setting_is_refused_naming_it(transport, where):
    with pytest.raises(ValidationError) as caught:
        TransportConfig.model_validate(transport)
    assert where in str(caught.value)


def test_with_ports_gives_each_family_port_a_new_one_and_keeps_the_rest():
    config = TransportConfig.model_validate(yaml.safe_load(FLAT_TRANSPORT))
    ports = iter((40001, 40002))
    moved = config.with_ports(lambda: next(ports))
    assert {moved.settings(ZenohSettings).port, moved.settings(MqttSettings).port} == {40001, 40002}
    assert moved.settings(ZenohSettings).path == "bridge" and moved.settings(MqttSettings).nagle is False
    assert moved.settings(DdsSettings) == config.settings(DdsSettings)
    assert config.settings(ZenohSettings).port == 7500  # a copy


def test_with_settings_keeps_what_the_request_set():
    config = TransportConfig(middleware="zenoh-peer").with_settings(ZenohSettings, express=True)
    assert config.settings(ZenohSettings).model_fields_set == {"express"}
    assert config.with_settings(ZenohSettings, path="bridge").settings(ZenohSettings).model_fields_set == {
        "express",
        "path",
    }


def test_every_family_settings_model_is_plain_frozen_data_with_defaults():
    assert set(SETTINGS_MODELS) >= {"dds", "zenoh", "mqtt"}
    for name, model in SETTINGS_MODELS.items():
        assert model.model_config.get("extra") == "forbid" and model.model_config.get("frozen"), name
        assert all(not field.is_required() for field in model.model_fields.values()), name
