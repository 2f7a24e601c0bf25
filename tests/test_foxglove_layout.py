"""The shipped Foxglove layout: valid JSON built from the kit's topic names, and every topic and
field it names exists in a trial's bags (a synthetic trial, written by the kit's bag writer)."""

import json

import pytest

from fieldtest import rosmsg
from fieldtest.analysis import analyze_trial
from fieldtest.analysis.rendering.foxglove import LAYOUT_FILE, build_layout, layout_text
from fieldtest.analysis.rendering.report import report_lines
from fieldtest.plan import SquarePlan
from fieldtest.record import read_bag, recordnames
from fieldtest.testkit.synth import SynthSpec, synthesize

SHORT = SquarePlan(laps=1, side_duration_s=1.5, turn_rate_dps=90.0)
KIT_TOPICS = {value for key, value in vars(recordnames).items() if key.endswith("_TOPIC")}


def _message_paths(layout: dict) -> list[str]:
    """Every message path the layout reads: 3D panel topics, plot series and custom x axes."""
    paths = []
    for panel_id, config in layout["configById"].items():
        if panel_id.startswith("3D!"):
            paths += list(config["topics"])
        paths += [series["value"] for series in config.get("paths", [])]
        if "xAxisPath" in config:
            paths.append(config["xAxisPath"]["value"])
    return paths


def _field_type(typename: str, fields: list[str]) -> str:
    """The type at ``fields`` inside ``typename`` (KeyError if a field does not exist)."""
    store = rosmsg.typestore()
    for name in fields:
        kind, detail = dict(store.fielddefs[typename][1])[name]
        typename = detail if isinstance(detail, str) else detail[0]
    return typename


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    trial_dir = tmp_path_factory.mktemp("fox") / "trial"
    synthesize(trial_dir, SynthSpec(plan=SHORT))
    return trial_dir


def test_the_shipped_file_is_the_layout_the_kit_builds():
    assert json.loads(LAYOUT_FILE.read_text()) == build_layout()
    assert (
        LAYOUT_FILE.read_text() == layout_text()
    )  # regenerate: python -m fieldtest.analysis.rendering.foxglove


def test_every_topic_and_field_the_layout_names_is_in_the_trial_bags(trial):
    types = {}
    for bag in (recordnames.HOST_BAG, recordnames.ROBOT_BAG, recordnames.MOCAP_BAG):
        types.update(read_bag(trial / bag).topics)
    paths = _message_paths(build_layout())
    assert {path.split(".")[0] for path in paths} == {
        recordnames.MOCAP_POSE_TOPIC,
        recordnames.RECEIPTS_TOPIC,
        recordnames.CMD_VEL_TOPIC,
    }
    for path in paths:
        topic, *fields = path.split(".")
        assert topic in KIT_TOPICS, f"{path}: not a topic of fieldtest/record/recordnames.py"
        assert topic in types, f"{path}: no such topic in the trial's bags"
        leaf = _field_type(types[topic], fields)
        if fields:
            assert leaf == "float64", f"{path}: a plot needs a number, got {leaf}"


def test_every_panel_is_placed_once():
    layout = build_layout()

    def leaves(node):
        return [node] if isinstance(node, str) else leaves(node["first"]) + leaves(node["second"])

    assert sorted(leaves(layout["layout"])) == sorted(layout["configById"])


def test_the_report_names_the_layout(trial):
    metrics = analyze_trial(trial, plots=False, write=False)
    text = "\n".join(report_lines(metrics))
    assert f"Open in Foxglove: load {LAYOUT_FILE} as the layout" in text
    assert LAYOUT_FILE.is_file()
