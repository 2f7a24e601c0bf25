import pytest
import yaml
from rosbags.rosbag2.metadata import parse_qos

from fieldtest.qos import QOS_NAMES, QosError, get_qos, rosbag2_qos_yaml


def test_ros2_presets():
    default = get_qos("default")
    assert (default.history, default.depth, default.reliability, default.durability) == (
        "keep_last",
        10,
        "reliable",
        "volatile",
    )
    sensor = get_qos("sensor")
    assert (sensor.history, sensor.depth, sensor.reliability) == ("keep_last", 5, "best_effort")
    parameters = get_qos("parameters")
    assert (parameters.history, parameters.depth, parameters.reliability) == ("keep_all", 1000, "reliable")


@pytest.mark.parametrize(
    "name, history, depth, reliability, durability",
    [
        ("fernandez-a", "keep_last", 5, "best_effort", "volatile"),
        ("fernandez-b", "keep_all", None, "best_effort", "transient_local"),
        ("fernandez-c", "keep_last", 5, "reliable", "volatile"),
        ("fernandez-d", "keep_last", 1000, "reliable", "volatile"),
        ("fernandez-e", "keep_all", None, "reliable", "transient_local"),
    ],
)
def test_fernandez_cases(name, history, depth, reliability, durability):
    qos = get_qos(name)
    assert (qos.history, qos.reliability, qos.durability) == (history, reliability, durability)
    if depth is not None:  # KEEP_ALL ignores depth
        assert qos.depth == depth


def test_unknown_name_lists_valid_names():
    with pytest.raises(QosError) as err:
        get_qos("fast")
    text = str(err.value)
    assert "'fast'" in text
    assert all(name in text for name in QOS_NAMES)
    assert "\n" not in text


def test_profiles_are_immutable():
    with pytest.raises(ValueError):
        get_qos("default").depth = 3


@pytest.mark.parametrize("name", QOS_NAMES)
def test_rosbag2_yaml_reads_back(name):
    qos = get_qos(name)
    text = rosbag2_qos_yaml(name)
    (entry,) = yaml.safe_load(text)
    assert entry["history"] == (1 if qos.history == "keep_last" else 2)
    assert entry["reliability"] == (1 if qos.reliability == "reliable" else 2)
    assert entry["durability"] == (2 if qos.durability == "volatile" else 1)
    assert entry["depth"] == qos.depth
    (parsed,) = parse_qos(text)  # what rosbags' reader does with metadata.yaml
    assert parsed.depth == qos.depth
    assert parsed.reliability.name.lower() == qos.reliability
