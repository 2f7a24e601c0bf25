"""Security for the lab's rmw-zenoh case: rmw_zenoh reads no ROS_SECURITY_* variables and no
``--enclave``; it is secured by Zenoh session and router configs (mutual TLS + access control) that
``ros2 run zenoh_security_tools generate_configs`` derives from an SROS2 policy and keystore.

How that tool reads a policy (ros2/rmw_zenoh zenoh_security_tools/src/config_generator.cpp):

- only the first ``<enclave>`` of the policy is read; every ``<profile node=...>`` in it becomes a
  session config ``<node>.json5`` in the working directory, the router config is ``zenohd.json5``;
- a name's ``~`` is replaced by the bare node name and a leading ``/`` dropped; the profile's
  ``ns`` is ignored, so relative and private names lose the namespace: the kit writes every name
  fully qualified;
- the allowed key expressions are ``<domain>/<name>/**`` (rmw_zenoh's keys are
  ``<domain>/<name>/<type>/<type hash>``);
- with ``--enclaves DIR`` each node's TLS files come from ``DIR/<node>`` (sros2 enclave layout)
  and the router's from ``DIR/zenohd``; endpoints switch from tcp/ to tls/.

So the kit writes a policy with one enclave whose profiles are the kit's rmw_zenoh nodes, and one
sros2 enclave per node under ``/fieldtest/rmw_zenoh`` (docs/security.md). This module is the family's
part of the keystore (``write_keystore_material``, the ``RmwZenoh.keystore_material`` hook that
``fieldtest keys create`` and a trial's keystore call); where the lab finds the generated configs is
``fieldtest.middleware.rmw_zenoh.security``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from fieldtest.names import RMW_ZENOH_ENCLAVE
from fieldtest.security.keystore import KeystoreOptions, Validity, create_enclave
from fieldtest.security.policy import (
    ROS_GLOBAL_PUBLISH,
    ROS_GLOBAL_SUBSCRIBE,
    ROS_NODE_SERVICES,
    EnclaveSpec,
    kit_enclave,
    trial_topic,
)

ROUTER_NODE = "zenohd"  # zenoh_security_tools' name for the router's enclave and config
KIT_DIR = "fieldtest/rmw_zenoh"  # inside the keystore: the policy and the generated configs
# The kit's processes on rmw_zenoh, by the kit enclave whose rights they have.
RMW_ZENOH_ROLES = ("host", "robot", "recorder")


def _node_name(ns: str, node: str) -> str:
    return f"{ns}/{node}" if ns else f"/{node}"


def policy_names(namespace: str) -> dict[str, dict[str, list[str]]]:
    """node -> {"publish", "subscribe", "services"}: fully qualified names for each kit node."""
    stripped = namespace.strip("/")
    ns = f"/{stripped}" if stripped else ""
    out: dict[str, dict[str, list[str]]] = {}
    for role in RMW_ZENOH_ROLES:
        spec = kit_enclave(role)
        node_ns = ns if spec.namespaced and not spec.nodes_at_root else ""
        topic_ns = ns if spec.namespaced else ""
        for node in spec.nodes:
            fqn = _node_name(node_ns, node)
            out[node] = {
                "publish": [trial_topic(topic_ns, t) for t in spec.publish] + list(ROS_GLOBAL_PUBLISH),
                "subscribe": [trial_topic(topic_ns, t) for t in spec.subscribe] + list(ROS_GLOBAL_SUBSCRIBE),
                "services": [fqn + s[1:] for s in ROS_NODE_SERVICES],  # "~/x" -> <fqn>/x
            }
    return out


def rmw_zenoh_policy_xml(namespace: str = "") -> str:
    """The policy ``generate_configs`` reads: one enclave, one profile per kit node."""
    root = ET.Element("policy", version="0.2.0")
    enclave = ET.SubElement(ET.SubElement(root, "enclaves"), "enclave", path=RMW_ZENOH_ENCLAVE)
    profiles = ET.SubElement(enclave, "profiles")
    for node, names in policy_names(namespace).items():
        profile = ET.SubElement(profiles, "profile", ns="/", node=node)
        for right in ("publish", "subscribe"):
            topics = ET.SubElement(profile, "topics", {right: "ALLOW"})
            for name in names[right]:
                ET.SubElement(topics, "topic").text = name
        # the tool reads one right per <services> element: reply and request separately
        for right in ("reply", "request"):
            services = ET.SubElement(profile, "services", {right: "ALLOW"})
            for name in names["services"]:
                ET.SubElement(services, "service").text = name
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def allowed_key_exprs(policy_text: str, domain_id: int) -> dict[str, dict[str, set[str]]]:
    """node -> right -> key expressions, as generate_configs derives them (first enclave only)."""
    enclave = ET.fromstring(policy_text).find("enclaves/enclave")
    out: dict[str, dict[str, set[str]]] = {}
    if enclave is None:
        return out
    for profile in enclave.iter("profile"):
        node = profile.get("node", "")
        rights = out.setdefault(node, {})
        for group, item in (("topics", "topic"), ("services", "service")):
            for element in profile.findall(group):
                for right in ("publish", "subscribe", "reply", "request"):
                    if element.get(right) == "ALLOW":
                        names = {(e.text or "").replace("~", node, 1) for e in element.findall(item)}
                        keys = {f"{domain_id}/{n[1:] if n.startswith('/') else n}/**" for n in names}
                        rights.setdefault(right, set()).update(keys)
    return out


def generated_dir(keystore: str | Path) -> Path:
    return Path(keystore).expanduser().absolute() / KIT_DIR


def write_keystore_material(root: Path, options: KeystoreOptions, validity: Validity) -> None:
    """The rmw-zenoh case's policy and the per-node enclaves zenoh_security_tools takes its TLS
    files from (their DDS permissions are not used)."""
    if not set(RMW_ZENOH_ROLES) <= {spec.role for spec in options.enclaves}:
        return  # a partial keystore (some enclaves only) does not serve the rmw-zenoh case
    (root / KIT_DIR).mkdir(parents=True, exist_ok=True)
    (root / KIT_DIR / "policy.xml").write_text(rmw_zenoh_policy_xml(options.namespace))
    for node in [*policy_names(options.namespace), ROUTER_NODE]:
        spec = EnclaveSpec(
            f"{RMW_ZENOH_ENCLAVE}/{node}",
            f"rmw_zenoh_{node}",
            "rmw_zenoh TLS identity",
            ros_node_defaults=False,
        )
        create_enclave(
            root, spec, domain_id=options.domain_id, validity=validity, namespace=options.namespace
        )


def machine_share_paths(keystore: Path, enclaves: tuple[str, ...]) -> list[str]:
    """What a machine whose processes run as the kit ``enclaves`` needs of this material: the
    enclaves and generated configs of its rmw_zenoh nodes and of its own rmw_zenohd, and the policy
    (relative to the keystore; those the keystore has)."""
    specs = [kit_enclave(path) for path in enclaves]
    nodes = [node for spec in specs if spec.role in RMW_ZENOH_ROLES for node in spec.nodes]
    if not nodes:
        return []
    nodes.append(ROUTER_NODE)  # each machine runs its own rmw_zenohd
    paths = [f"{KIT_DIR}/policy.xml", *(f"{KIT_DIR}/{node}.json5" for node in nodes)]
    paths += [f"enclaves{RMW_ZENOH_ENCLAVE}/{node}" for node in nodes]
    return [path for path in paths if (Path(keystore) / path).exists()]
