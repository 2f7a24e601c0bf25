"""Security as part of a trial: prepare_trial_security, and the transports applying it by themselves."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from cryptography import x509

from fieldtest.middleware import registry
from fieldtest.middleware.registry import prepare_trial_security
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.security import (
    KeystoreError,
    KeystoreOptions,
    SecuritySettingError,
    check_keystore,
    create_keystore,
)
from fieldtest.security.keystore import ENCLAVES, governance_variant_path, load_cert
from fieldtest.security.trialsecurity import TrialSecurityError
from fieldtest.transport import TransportConfig

PLAN = SquarePlan(side_duration_s=1.0, laps=1)


def request_for(**transport) -> TrialRequest:
    return TrialRequest(plan=PLAN, transport=TransportConfig(**transport))


@pytest.fixture(scope="module")
def shared_keystore(tmp_path_factory) -> Path:
    return create_keystore(tmp_path_factory.mktemp("shared") / "keystore", KeystoreOptions(domain_id=3))


def active_governance(keystore: Path) -> bytes:
    return (keystore / ENCLAVES / "governance.p7s").read_bytes()


def test_security_none_leaves_the_request_alone(tmp_path):
    request = request_for(middleware="zenoh-peer")
    assert prepare_trial_security(request, tmp_path) == request
    assert not (tmp_path / "keystore").exists()


def test_fresh_keystore_for_the_trial(tmp_path):
    request = request_for(
        middleware="dds", security="rtps-encrypt", domain_id=7, namespace="/tb4", robot_address="10.1.2.3"
    )
    prepared = prepare_trial_security(request, tmp_path)
    keystore = Path(prepared.transport.keystore)
    assert keystore == (tmp_path / "keystore").absolute()
    assert prepared.transport.model_copy(update={"keystore": ""}) == request.transport
    assert check_keystore(keystore) == []
    assert active_governance(keystore) == governance_variant_path(keystore, "rtps-encrypt").read_bytes()
    assert "<id>7</id>" in (keystore / ENCLAVES / "governance.xml").read_text()
    assert "rt/tb4/cmd_vel" in (keystore / ENCLAVES / "fieldtest/robot/permissions.xml").read_text()
    san = load_cert(keystore / "tls" / "robot.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert "10.1.2.3" in [str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)]


def test_given_keystore_is_used_as_is_and_its_governance_activated(shared_keystore, tmp_path):
    ca_before = (shared_keystore / "public" / "ca.cert.pem").read_bytes()
    request = request_for(
        middleware="dds", security="submessage-encrypt", domain_id=3, keystore=str(shared_keystore)
    )
    prepared = prepare_trial_security(request, tmp_path)
    assert prepared.transport.keystore == str(shared_keystore.absolute())
    assert not (tmp_path / "keystore").exists()
    assert (shared_keystore / "public" / "ca.cert.pem").read_bytes() == ca_before
    assert (
        active_governance(shared_keystore)
        == governance_variant_path(shared_keystore, "submessage-encrypt").read_bytes()
    )


@pytest.mark.parametrize(
    ("transport", "message"),
    [
        (
            {"middleware": "zenoh-peer", "security": "sros2"},
            "'sros2' does not apply to middleware 'zenoh-peer'",
        ),
        ({"middleware": "dds", "security": "mtls-acl"}, "'mtls-acl' does not apply to middleware 'dds'"),
        ({"middleware": "dds", "security": "sros3"}, "unknown security setting 'sros3'"),
        (
            {"middleware": "dds", "security": "sros2", "keystore": "/nonexistent/ks"},
            "keystore directory not found",
        ),
        (
            {"middleware": "dds", "security": "sros2", "domain_id": 4},
            "made for domain [3], the trial uses domain 4",
        ),
        (
            {"middleware": "zenoh-peer", "security": "mtls-acl", "robot_address": "10.9.9.9"},
            "does not name 10.9.9.9",
        ),
        (
            {"middleware": "zenoh-router", "security": "mtls-acl", "router_address": "10.9.9.8"},
            "does not name 10.9.9.8",
        ),
    ],
)
def test_unusable_security_is_one_clear_line(shared_keystore, tmp_path, transport, message):
    transport.setdefault("keystore", str(shared_keystore))
    with pytest.raises(TrialSecurityError) as info:
        prepare_trial_security(request_for(**transport), tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_keystore_problems_refuse_the_trial(tmp_path):
    keystore = create_keystore(tmp_path / "keystore", KeystoreOptions())
    (keystore / ENCLAVES / "fieldtest/robot/key.pem").unlink()
    request = request_for(middleware="dds", security="sros2", keystore=str(keystore))
    with pytest.raises(TrialSecurityError, match=r"fieldtest/robot/key.pem: missing"):
        prepare_trial_security(request, tmp_path / "trial")


def test_concurrent_trials_sharing_a_keystore(shared_keystore, tmp_path):
    """Threads preparing different settings on one keystore, and others making their own, all succeed."""
    settings = ["sros2", "rtps-sign", "rtps-encrypt", "origin-auth-encrypt", "submessage-encrypt"] * 2
    errors: list[BaseException] = []
    prepared: list[TrialRequest] = []

    def prepare(i: int, setting: str) -> None:
        try:
            shared = {"keystore": str(shared_keystore), "domain_id": 3} if i % 2 else {"domain_id": 10 + i}
            prepared.append(
                prepare_trial_security(
                    request_for(middleware="dds", security=setting, **shared), tmp_path / str(i)
                )
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(i, s)) for i, s in enumerate(settings)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(prepared) == len(settings)
    assert check_keystore(shared_keystore) == []
    own = [
        Path(p.transport.keystore)
        for p in prepared
        if Path(p.transport.keystore) != shared_keystore.absolute()
    ]
    assert len(set(own)) == len(settings) // 2


# ------------------------------------------------- the registry applies it (security hands the fragment)


def secured(keystore: Path, middleware: str) -> TransportConfig:
    return TransportConfig(middleware=middleware, security="mtls-acl", keystore=str(keystore))


def test_router_and_broker_configure_tls_from_the_config(shared_keystore, tmp_path):
    from fieldtest.middleware.zenoh.infra import ZenohRouter

    router = registry.infrastructure(secured(shared_keystore, "zenoh-router"), tmp_path)
    overrides = json.loads(router.argv[router.argv.index("--overrides-json") + 1])
    assert overrides["listen"]["endpoints"] == ["tls/127.0.0.1:7447"]
    assert overrides["transport"]["link"]["tls"]["listen_certificate"].endswith("tls/router.crt")
    assert overrides["access_control"]["default_permission"] == "deny"

    broker = registry.infrastructure(secured(shared_keystore, "mqtt-local-broker"), tmp_path)
    conf = broker.conf_text.splitlines()
    assert "require_certificate true" in conf and "allow_anonymous false" in conf
    assert f"acl_file {(tmp_path / 'broker' / 'acl').absolute()}" in conf
    assert "user /fieldtest/robot" in (tmp_path / "broker" / "acl").read_text()

    explicit = ZenohRouter(secured(shared_keystore, "zenoh-router"), overrides={"mode": "router"})
    assert json.loads(explicit.argv[explicit.argv.index("--overrides-json") + 1]) == {"mode": "router"}


@pytest.mark.parametrize("identity", ["router", "broker", "robot"])
def test_missing_tls_key_refuses_before_anything_starts(shared_keystore, tmp_path, identity):
    import shutil

    keystore = tmp_path / "keystore"
    shutil.copytree(shared_keystore, keystore, symlinks=True)
    (keystore / "tls" / f"{identity}.key").unlink()
    message = rf"{identity} cannot start with security 'mtls-acl': .*tls/{identity}.key: missing"
    with pytest.raises(KeystoreError, match=message):
        if identity == "router":
            registry.infrastructure(secured(keystore, "zenoh-router"), tmp_path)
        elif identity == "broker":
            registry.infrastructure(secured(keystore, "mqtt-local-broker"), tmp_path)
        else:
            registry.open_transport(secured(keystore, "zenoh-peer"), "robot")
    if identity == "robot":
        with pytest.raises(KeystoreError, match=message):
            registry.open_transport(secured(keystore, "mqtt-local-broker"), "robot")


def test_setting_of_another_middleware_is_refused_by_every_transport(shared_keystore, tmp_path):
    sros2 = {"security": "sros2", "keystore": str(shared_keystore)}
    with pytest.raises(SecuritySettingError, match="does not apply to middleware 'zenoh-peer'"):
        registry.open_transport(TransportConfig(middleware="zenoh-peer", **sros2), "host")
    with pytest.raises(SecuritySettingError, match="does not apply to middleware 'mqtt-broker'"):
        registry.infrastructure(TransportConfig(middleware="mqtt-broker", **sros2), tmp_path)
    with pytest.raises(SecuritySettingError, match="does not apply to middleware 'dds'"):
        registry.open_transport(
            TransportConfig(middleware="dds", security="mtls-acl", keystore=str(shared_keystore)), "host"
        )


@pytest.mark.parametrize(
    ("middleware", "security"),
    [("dds", "sros2"), ("zenoh-peer", "mtls-acl"), ("mqtt-local-broker", "mtls-acl")],
)
def test_a_transport_never_opens_secured_without_its_fragment(middleware, security, tmp_path):
    """Transport does not import security: a secured config opened past the registry is refused
    (instead of silently opening a plain link)."""
    from fieldtest.middleware.dds.transport import open_dds
    from fieldtest.middleware.mqtt.infra import MosquittoBroker
    from fieldtest.middleware.mqtt.transport import open_mqtt
    from fieldtest.middleware.zenoh.infra import ZenohRouter
    from fieldtest.middleware.zenoh.transport import open_zenoh
    from fieldtest.transport.base import SecurityFragmentMissing

    config = TransportConfig(middleware=middleware, security=security, keystore=str(tmp_path))
    opener = {"dds": open_dds, "zenoh-peer": open_zenoh, "mqtt-local-broker": open_mqtt}[middleware]
    with pytest.raises(SecurityFragmentMissing, match="open it through fieldtest.middleware.registry"):
        opener(config, "host")
    with pytest.raises(SecurityFragmentMissing):
        ZenohRouter(config.model_copy(update={"middleware": "zenoh-router"}))
    with pytest.raises(SecurityFragmentMissing):
        MosquittoBroker(config.model_copy(update={"middleware": "mqtt-local-broker"}), tmp_path)


def test_runner_refuses_the_trial_before_starting_anything(tmp_path):
    from fieldtest.runner import run_twin_trial

    request = request_for(middleware="zenoh-peer", security="sros2")
    with pytest.raises(TrialSecurityError, match="does not apply to middleware 'zenoh-peer'"):
        run_twin_trial(request, tmp_path)
    assert list(tmp_path.iterdir()) == []
