"""The middleware registry: one entry per catalog name, and the facts the callers ask of it."""

from __future__ import annotations

import pytest

from fieldtest.catalog import CATALOG, LAB_MIDDLEWARES, TWIN_MIDDLEWARES
from fieldtest.middleware import registry
from fieldtest.security.governance import GOVERNANCE_PROFILES
from fieldtest.security.securitysettings import SECURITY_SETTINGS, SecuritySettingError


def test_registry_and_catalog_list_the_same_names():
    assert tuple(registry.REGISTRY) == LAB_MIDDLEWARES == tuple(e.name for e in CATALOG)
    assert registry.names() == TWIN_MIDDLEWARES
    for name, entry in registry.REGISTRY.items():
        assert entry.name == name and entry.family == registry.get(name).catalog.family
    with pytest.raises(registry.UnknownMiddlewareError, match="unknown middleware 'dds2'"):
        registry.get("dds2")


def test_registry_facts_are_the_old_tables():
    """What the callers used to keep in their own tables (runner's INFRA_LOG_NAME and emulated
    nodes, campaign's DEFAULT_SECURE_SETTING, the lab's BRIDGED and start_* rules, security's
    per-family lists, the TLS listeners), now asked of the registry."""
    facts = {
        name: (m.infra_process, m.emulated_nodes(), m.secure_default, m.lab_bridge, m.lab_host_starts(True))
        for name, m in registry.REGISTRY.items()
    }
    assert facts == {
        "dds": (None, [], "sros2", None, None),
        "zenoh-peer": (None, [], "mtls-acl", "zenoh-bridge-ros2dds", None),
        "zenoh-router": ("router", ["router"], "mtls-acl", "zenoh-bridge-ros2dds", "router"),
        "mqtt-local-broker": ("broker", [], "mtls-acl", "mqtt_client", "broker"),
        "mqtt-broker": ("broker", ["broker"], "mtls-acl", "mqtt_client", None),
        "rmw-zenoh": (None, [], "mtls-acl", None, "router"),
        "fastdds": (None, [], "sros2", None, None),
    }
    assert registry.get("zenoh-router").lab_host_starts(False) is None  # router elsewhere
    listeners = {e.name: e.listener for e in CATALOG if e.listener}
    assert listeners == {
        "zenoh-peer": ("robot", "robot_address"),
        "zenoh-router": ("router", "router_address"),
        "mqtt-local-broker": ("broker", "host_address"),
        "mqtt-broker": ("broker", "broker_address"),
    }
    assert registry.families() == {
        "dds": ("dds", "fastdds"),
        "zenoh": ("zenoh-peer", "zenoh-router"),
        "mqtt": ("mqtt-local-broker", "mqtt-broker"),
        "rmw-zenoh": ("rmw-zenoh",),
    }


def test_each_family_declares_the_security_settings_it_takes():
    """Security reads which settings a middleware takes from its family (``security_settings``):
    DDS Security on the DDS names, mutual TLS on Zenoh and MQTT, none of the kit's on rmw-zenoh
    (secured by its own configs); every kit setting is taken somewhere, every secure default too."""
    dds = ("none", *GOVERNANCE_PROFILES)
    takes = {name: m.security_settings for name, m in registry.REGISTRY.items()}
    assert takes == {
        "dds": dds,
        "zenoh-peer": ("none", "mtls-acl"),
        "zenoh-router": ("none", "mtls-acl"),
        "mqtt-local-broker": ("none", "mtls-acl"),
        "mqtt-broker": ("none", "mtls-acl"),
        "rmw-zenoh": (),
        "fastdds": dds,
    }
    assert {s for settings in takes.values() for s in settings} == set(SECURITY_SETTINGS)
    for name, m in registry.REGISTRY.items():
        assert m.own_security or m.security_setting(m.secure_default).name == m.secure_default
        for setting in set(SECURITY_SETTINGS) - set(m.security_settings):
            with pytest.raises(
                SecuritySettingError, match=f"'{setting}' does not apply to middleware '{name}'"
            ):
                m.security_setting(setting)


def test_the_lab_hooks_classify_each_name():
    """What LabLaunch's rmw/bridged/zenoh/mqtt properties used to say, asked of the middleware."""
    facts = {
        name: (m.lab_bridged(), m.lab_dds_crosses(), m.lab_node_rmw("cyclonedds"), m.lab_node_rmw("fastrtps"))
        for name, m in registry.REGISTRY.items()
    }
    assert facts == {
        "dds": (False, True, "cyclonedds", "fastrtps"),
        "zenoh-peer": (True, False, "cyclonedds", "fastrtps"),
        "zenoh-router": (True, False, "cyclonedds", "fastrtps"),
        "mqtt-local-broker": (True, False, "cyclonedds", "fastrtps"),
        "mqtt-broker": (True, False, "cyclonedds", "fastrtps"),
        "rmw-zenoh": (False, False, "zenoh", "zenoh"),
        "fastdds": (False, True, "fastrtps", "fastrtps"),
    }


def test_keystore_material_comes_from_the_families_that_have_some():
    """``fieldtest keys create`` and a trial's keystore write what ``keystore_material()`` lists:
    each middleware overriding the hook once (rmw-zenoh: its policy and per-node enclaves)."""
    assert [writer.__self__.name for writer in registry.keystore_material()] == ["rmw-zenoh"]
