"""Campaign files: matrix expansion into validated TrialRequests, run order, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fieldtest.trialcampaign import (
    CampaignError,
    campaign_json_schema,
    expand,
    load_campaign,
    load_trials,
    parse_campaign,
)

ROOT = Path(__file__).resolve().parents[1]
TRIALS = ROOT / "trials"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_seed_study_matrix_is_five_middlewares_by_security_by_repetitions():
    campaign, trials = load_trials(TRIALS / "seed-study.yaml")
    assert len(trials) == 5 * 2 * campaign.repetitions == 30
    assert campaign.lab.ros_distro == "jazzy"  # a TurtleBot 4 as shipped: no edit for the usual robot
    cases = {(t.transport.middleware, t.transport.security) for t in trials}
    assert cases == {
        ("dds", "none"),
        ("dds", "sros2"),
        ("zenoh-peer", "none"),
        ("zenoh-peer", "mtls-acl"),
        ("zenoh-router", "none"),
        ("zenoh-router", "mtls-acl"),
        ("mqtt-local-broker", "none"),
        ("mqtt-local-broker", "mtls-acl"),
        ("mqtt-broker", "none"),
        ("mqtt-broker", "mtls-acl"),
    }
    assert all(
        t.plan.motion_s == pytest.approx(96.0) and t.plan.side_m == pytest.approx(0.99) for t in trials
    )
    assert len({t.name for t in trials}) == len(trials)
    assert len({t.seed for t in trials}) == len(trials)
    # interleaved: all of repetition 0 before any repetition 1
    reps = [t.repetition for t in trials]
    assert reps == sorted(reps)


def test_every_shipped_campaign_expands():
    for path in TRIALS.glob("*.yaml"):
        _, trials = load_trials(path)
        assert trials, path


def test_orders(tmp_path):
    base = "campaign: c\nmatrix: {middleware: [dds, zenoh-peer], qos: [default, sensor]}\nrepetitions: 2\n"
    grouped = expand(parse_campaign(__import__("yaml").safe_load(base + "order: grouped\n")))
    assert [t.name for t in grouped[:2]] == ["c-dds-default-r0", "c-dds-default-r1"]
    interleaved = expand(parse_campaign(__import__("yaml").safe_load(base)))
    assert [t.name for t in interleaved[:4]] == [
        "c-dds-default-r0",
        "c-dds-sensor-r0",
        "c-zenoh-peer-default-r0",
        "c-zenoh-peer-sensor-r0",
    ]
    one = expand(load_campaign(_write(tmp_path, base + "order: shuffled\nseed: 7\n")))
    two = expand(load_campaign(_write(tmp_path, base + "order: shuffled\nseed: 7\n")))
    other = expand(load_campaign(_write(tmp_path, base + "order: shuffled\nseed: 8\n")))
    assert [t.name for t in one] == [t.name for t in two]
    assert sorted(t.name for t in one) == sorted(t.name for t in interleaved)
    assert [t.name for t in one] != [t.name for t in other]


def test_exclude_and_dotted_fields(tmp_path):
    path = _write(
        tmp_path,
        "campaign: c\n"
        "base: {plan: {laps: 1}}\n"
        "matrix: {middleware: [dds, zenoh-peer], plan.linear_speed_mps: [0.2, 0.3]}\n"
        "exclude: [{middleware: dds, plan.linear_speed_mps: 0.3}]\n",
    )
    trials = expand(load_campaign(path))
    assert [(t.transport.middleware, t.plan.linear_speed_mps) for t in trials] == [
        ("dds", 0.2),
        ("zenoh-peer", 0.2),
        ("zenoh-peer", 0.3),
    ]
    assert all(t.plan.laps == 1 for t in trials)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "campaign: c\nmatrix: {middleware: [dds, zenoh]}\n",
            "c.yaml: matrix.middleware value 'zenoh': Input should be",
        ),
        ("campaign: c\nbase: {plan: {lapz: 2}}\n", "c.yaml: base.plan.lapz: Extra inputs are not permitted"),
        ("campaign: c\nbase: {plan: {laps: 0}}\n", "c.yaml: base.plan: laps must be at least 1"),
        (
            "campaign: c\nmatrix: {qos: [default, fast]}\n",
            "c.yaml: matrix.qos value 'fast': unknown QoS profile",
        ),
        (
            "campaign: c\nmatrix: {security: [sros2]}\nbase: {transport: {middleware: zenoh-peer, keystore: k}}\n",
            "c.yaml: matrix.security value 'sros2': security setting 'sros2' does not apply",
        ),
        (
            "campaign: c\nmatrix: {security: ['on']}\nbase: {robot_model: turtlebot4-standard}\n",
            "c.yaml: base.transport.keystore: security 'sros2' needs a keystore",
        ),
        ("campaign: c\nmatrix: {middleware: []}\n", "c.yaml: matrix.middleware: empty list"),
        ("campaign: c\nmatrix: {colour: [red]}\n", "c.yaml: matrix.colour: not a trial field"),
        (
            "campaign: c\nmatrix: {middleware: [dds]}\nexclude: [{qos: default}]\n",
            "c.yaml: exclude[0].qos: not a matrix field",
        ),
        (
            "campaign: c\nmatrix: {middleware: [dds]}\nexclude: [{middleware: dds}]\n",
            "c.yaml: exclude: leaves no trial",
        ),
        ("campaign: c\nrepetitions: 0\n", "c.yaml: repetitions: Input should be greater than or equal to 1"),
        ("campaign: c d\n", "c.yaml: campaign: 'c d' is not a usable name"),
        ("campaign: c\nlab: {countdown: 3}\n", "c.yaml: lab.countdown: Extra inputs are not permitted"),
        ("- a\n- b\n", "c.yaml: expected a mapping at the top level"),
        ("campaign: c\nmatrix: {middleware: [dds\n", "c.yaml: not valid YAML at line"),
    ],
)
def test_errors_are_one_line_naming_file_and_field(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(CampaignError) as info:
        load_trials(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path.parent / expected.split(":")[0]))
    assert expected.split(": ", 1)[1] in message


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(CampaignError, match=r"nope.yaml: cannot read"):
        load_campaign(tmp_path / "nope.yaml")


def test_security_on_picks_each_middlewares_standard_protection(tmp_path):
    path = _write(
        tmp_path,
        "campaign: c\nbase: {transport: {keystore: /k}}\n"
        "matrix: {middleware: [dds, zenoh-router, mqtt-broker], security: ['on']}\n",
    )
    assert [t.transport.security for t in expand(load_campaign(path))] == ["sros2", "mtls-acl", "mtls-acl"]


def test_committed_schema_is_current():
    committed = json.loads((TRIALS / "campaign.schema.json").read_text())
    assert committed == json.loads(json.dumps(campaign_json_schema(), sort_keys=True)), (
        "regenerate trials/campaign.schema.json from fieldtest.trialcampaign.campaign_json_schema()"
    )
    # refs resolve at the top level
    text = json.dumps(committed)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/$defs/')[1:]}:
        assert ref in committed["$defs"], ref
