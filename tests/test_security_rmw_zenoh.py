"""Security of the rmw-zenoh case: the policy zenoh_security_tools reads, the key expressions it
derives (matched with Zenoh's own key-expression rules), and where the launch plan points
rmw_zenoh at the generated session and router configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import zenoh

from fieldtest.cli import main
from fieldtest.labrun.orchestration.launchplan import launch_plan
from fieldtest.linkconfig import TransportConfig
from fieldtest.middleware import registry
from fieldtest.middleware.registry import prepare_trial_security
from fieldtest.middleware.rmw_zenoh.keystorematerial import (
    RMW_ZENOH_ROLES,
    ROUTER_NODE,
    allowed_key_exprs,
    generated_dir,
    rmw_zenoh_policy_xml,
)
from fieldtest.middleware.rmw_zenoh.security import generate_command
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest
from fieldtest.security.keystore import KeystoreOptions, create_keystore
from fieldtest.security.policy import KIT_ENCLAVES, kit_enclave, policy_xml

TYPE_KEY = "geometry_msgs::msg::dds_::TwistStamped_/RIHS01_0123abcd"  # <type>/<hash>, any value
DOMAIN = 3


def _rmw_key(ros_name: str) -> zenoh.KeyExpr:
    """rmw_zenoh's key for a topic or service: <domain>/<name without leading slash>/<type>/<hash>."""
    return zenoh.KeyExpr(f"{DOMAIN}/{ros_name.lstrip('/')}/{TYPE_KEY}")


def _allowed(allowed: dict[str, set[str]], right: str, ros_name: str) -> bool:
    key = _rmw_key(ros_name)
    return any(zenoh.KeyExpr(expr).intersects(key) for expr in allowed.get(right, set()))


def _uses(namespace: str) -> dict[str, dict[str, list[str]]]:
    """What each kit node really publishes, subscribes and serves (full ROS names)."""
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    out = {}
    for role in RMW_ZENOH_ROLES:
        spec = kit_enclave(role)
        topic_ns = ns if spec.namespaced else ""
        node_ns = "" if spec.nodes_at_root else topic_ns
        for node in spec.nodes:
            out[node] = {
                "publish": [f"{topic_ns}{t}" for t in spec.publish] + ["/rosout"],
                "subscribe": [f"{topic_ns}{t}" for t in spec.subscribe],
                "reply": [f"{node_ns}/{node}/get_parameters", f"{node_ns}/{node}/describe_parameters"],
            }
    return out


@pytest.mark.parametrize("namespace", ["", "/tb4", "/lab/tb4"])
def test_every_kit_node_gets_the_keys_it_uses(namespace):
    allowed = allowed_key_exprs(rmw_zenoh_policy_xml(namespace), DOMAIN)
    for node, uses in _uses(namespace).items():
        assert node in allowed, f"{node}: no session config would be generated"
        for right, names in uses.items():
            for name in names:
                assert _allowed(allowed[node], right, name), f"{node} may not {right} {name}"
        assert not _allowed(allowed[node], "publish", f"{namespace}/not_granted")


def test_the_dds_policy_would_not_serve_rmw_zenoh():
    """The keystore's DDS policy read the same way: only its first enclave counts and relative
    names lose the namespace, so the robot's link monitor gets nothing."""
    allowed = allowed_key_exprs(policy_xml(KIT_ENCLAVES, "/tb4"), DOMAIN)
    assert "link_monitor" not in allowed
    assert not _allowed(allowed["square_driver"], "publish", "/tb4/cmd_vel")


def _keys_create(tmp_path: Path) -> Path:
    ks = tmp_path / "ks"
    assert main(["keys", "create", "--keystore", str(ks), "--namespace", "/tb4"]) == 0
    return ks


def _trial_keystore(tmp_path: Path) -> Path:
    transport = TransportConfig(middleware="dds", security="sros2", namespace="/tb4")
    request = prepare_trial_security(TrialRequest(plan=SquarePlan(), transport=transport), tmp_path)
    return Path(request.transport.keystore)


@pytest.mark.parametrize("make", [_keys_create, _trial_keystore], ids=["fieldtest-keys", "trial"])
def test_keystore_holds_the_policy_and_one_enclave_per_node(make, tmp_path):
    """Both keystores the kit makes carry the family's material (its ``keystore_material`` hook)."""
    ks = make(tmp_path)
    folder = generated_dir(ks)
    assert (folder / "policy.xml").read_text() == rmw_zenoh_policy_xml("/tb4")
    for node in [*allowed_key_exprs(rmw_zenoh_policy_xml("/tb4"), 0), ROUTER_NODE]:
        enclave = ks / "enclaves/fieldtest/rmw_zenoh" / node
        assert {"cert.pem", "key.pem", "identity_ca.cert.pem"} <= {p.name for p in enclave.iterdir()}
    argv = generate_command(ks, 0, "router.json5", "session.json5")
    assert argv[:4] == ["ros2", "run", "zenoh_security_tools", "generate_configs"]
    assert argv[argv.index("--enclaves") + 1] == str(ks.absolute() / "enclaves/fieldtest/rmw_zenoh")


def test_the_security_layer_alone_writes_no_family_material(tmp_path):
    """``create_keystore`` adds only what its callers hand in; a partial keystore gets none either."""
    bare = create_keystore(tmp_path / "bare", KeystoreOptions(namespace="/tb4"))
    assert not generated_dir(bare).exists()
    assert not (bare / "enclaves/fieldtest/rmw_zenoh").exists()
    partial = KeystoreOptions(enclaves=(kit_enclave("host"),))
    ks = create_keystore(tmp_path / "partial", partial, extra_material=registry.keystore_material())
    assert not generated_dir(ks).exists()


def test_launch_plan_points_rmw_zenoh_at_the_generated_configs(tmp_path):
    ks = tmp_path / "ks"
    folder = generated_dir(ks)
    folder.mkdir(parents=True)
    for node in ("square_driver", "link_monitor", "rosbag2_recorder", ROUTER_NODE):
        (folder / f"{node}.json5").write_text("{}\n")
    common = {"middleware": "rmw-zenoh", "security": "sros2", "keystore": str(ks), "trial_dir": str(tmp_path)}
    common["dry_run"] = "true"  # rmw_zenoh reaches no Create 3: refused unless nothing is driven
    env = {"ROS_DISTRO": "jazzy"}
    for role, node in (("host", "square_driver"), ("robot", "link_monitor")):
        plan = launch_plan({**common, "host_address": "10.0.0.10"}, role, environ=env)
        assert plan.nodes[0].env == {"ZENOH_SESSION_CONFIG_URI": str(folder / f"{node}.json5")}
        assert plan.nodes[0].ros_arguments == []  # rmw_zenoh has no enclave argument
        assert "ROS_SECURITY_ENABLE" in plan.environment.unset
        procs = {p.name: p for p in plan.processes}
        assert procs["ros2bag"].env == {"ZENOH_SESSION_CONFIG_URI": str(folder / "rosbag2_recorder.json5")}
        router = procs["rmw_zenohd"].env
        assert router["ZENOH_ROUTER_CONFIG_URI"] == str(folder / "zenohd.json5")
        expected = (
            'connect/endpoints=["tls/10.0.0.10:7447"]'
            if role == "robot"
            else 'listen/endpoints=["tls/0.0.0.0:7447"]'
        )
        assert router["ZENOH_CONFIG_OVERRIDE"] == expected


def test_plain_rmw_zenohd_listens_on_ipv4():
    plan = launch_plan(
        {"middleware": "rmw-zenoh", "dry_run": "true"}, "host", environ={"ROS_DISTRO": "jazzy"}
    )
    (router,) = [p for p in plan.processes if p.name == "rmw_zenohd"]
    assert router.env == {"ZENOH_CONFIG_OVERRIDE": 'listen/endpoints=["tcp/0.0.0.0:7447"]'}
