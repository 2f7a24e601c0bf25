"""The kit's SROS2 policy file, read the way sros2 reads it (its permissions.xsl naming rules).

``ros2 security`` tools turn policy.xml into permissions; they must grant exactly what the kit's
own permissions documents grant, or a keystore regenerated from the policy breaks the nodes.
"""

from __future__ import annotations

import pytest

from fieldtest.security.policy import KIT_ENCLAVES, dds_grants, policy_xml, sros2_grants, sros2_name  # noqa


@pytest.mark.parametrize(
    ("ns", "node", "name", "expected"),
    [
        # the cases of sros2's permissions.xsl, template "topic | service | action"
        ("/", "talker", "/chatter", "/chatter"),
        ("/", "talker", "chatter", "/chatter"),
        ("/tb4", "square_driver", "cmd_vel", "/tb4/cmd_vel"),
        ("/tb4/", "square_driver", "cmd_vel", "/tb4/cmd_vel"),
        ("/tb4", "square_driver", "~/get_parameters", "/tb4/square_driver/get_parameters"),
        ("/", "square_driver", "~/get_parameters", "/square_driver/get_parameters"),
        # the old form: sros2 glues the node and the name together
        ("/tb4", "square_driver", "~describe_parameters", "/tb4/square_driverdescribe_parameters"),
    ],
)
def test_sros2_name_resolution(ns, node, name, expected):
    assert sros2_name(ns, node, name) == expected


@pytest.mark.parametrize("namespace", ["", "/tb4", "/lab/tb4"])
def test_policy_file_grants_what_the_kit_permissions_grant(namespace):
    from_policy = sros2_grants(policy_xml(KIT_ENCLAVES, namespace))
    for spec in KIT_ENCLAVES:
        kit = dds_grants(spec, namespace)
        got = from_policy[spec.path]
        assert got.publish == kit.publish, spec.path
        assert got.subscribe == kit.subscribe, spec.path


def test_parameter_services_are_the_nodes_own():
    grants = dds_grants(next(s for s in KIT_ENCLAVES if s.role == "host"), "/tb4")
    assert "rq/tb4/square_driver/describe_parametersRequest" in grants.publish
    assert not any("square_driverdescribe" in name for name in grants.publish | grants.subscribe)
    names = {n for n in grants.publish | grants.subscribe if n.startswith(("rq", "rr"))}
    assert all("//" not in n for n in names)
