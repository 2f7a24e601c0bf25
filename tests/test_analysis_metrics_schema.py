"""metrics.json through its schema (fieldtest.analysis.metrics.schema): what analyze writes fits it, and a
malformed file or an unknown version is one line naming the file."""

import json

import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.metrics.schema import METRICS_VERSION, Metrics, MetricsError, read_metrics
from fieldtest.plan import SquarePlan
from fieldtest.testkit.synth import SynthSpec, synthesize

PLAN = SquarePlan(laps=3, side_duration_s=1.5, turn_rate_dps=90.0)
FAULT = {"kind": "outage", "start_s": 2.0, "duration_s": 0.5, "detail": "robot link down", "node": "robot"}
# Variants that change which sections are filled: complete, stopped early, no ground truth, no receipts.
VARIANTS = {
    "complete": SynthSpec(plan=PLAN, last_lap_shift_m=(0.01, 0.0)),
    "stopped": SynthSpec(plan=PLAN, stop_after_s=5.0),
    "no-mocap": SynthSpec(plan=PLAN, truncate={"mocap": 0.0}),
    "no-receipts": SynthSpec(plan=PLAN, truncate={"robot": 0.0}),
    # a capture of the robot's link, the robot's own traffic and a fault in the record
    "captured": SynthSpec(plan=PLAN, faults=[FAULT]),
}


# what a twin trial with a capture and the robot's own traffic records besides (fieldtest.netem.wire,
# fieldtest.twin.trafficpubsub)
def _direction(packets: int) -> dict:
    group = {
        "packets": packets,
        "bytes": 150 * packets,
        "packets_per_s": packets / 10,
        "bytes_per_s": 15.0 * packets,
    }
    idle = {"packets": 0, "bytes": 0, "packets_per_s": 0.0, "bytes_per_s": 0.0}
    data = group | {"size_bytes": {"median": 150, "p95": 150, "max": 150}}
    return {
        "kinds": {"user_data": data, "spdp": idle},
        "groups": {"user_data": group, "discovery": idle},
        "packets": packets,
        "bytes": 150 * packets,
        "overhead_packet_fraction": 0.0,
        "reliability_packets_per_data_packet": None,
        "rtps_submessages": {"DATA": packets},
        "tls_records": {},
        "data_submessages_per_packet": {"mean": 1.0, "max": 1},
    }


LINK_TRAFFIC = {
    "node": "robot",
    "wire": {
        "duration_s": 10.0,
        "directions": {"host_to_robot": _direction(200), "robot_to_host": _direction(5)},
    },
}
ROBOT_TRAFFIC = {
    "preset": "rviz",
    "graph": {"participants": 2, "nodes": ["turtlebot4_node", "oakd"]},
    "topics": {
        "/scan": {
            "type": "sensor_msgs/msg/LaserScan",
            "node": "rplidar_composition",
            "rate_hz": 5.5,
            "size_bytes": 7400,
            "sent": 55,
            "send_failures": 0,
            "received": 54,
            "bytes_received": 399600,
            "received_hz": 5.49,
            "expected_in_span": 54,
            "lost_in_span": 0,
            "age_ms": {"median": 1.2, "p95": 3.4},
        }
    },
}


def _captured(trial) -> None:
    from fieldtest.record.trial import read_trial, write_trial

    record = read_trial(trial)
    record.outcome.link_traffic = LINK_TRAFFIC
    record.outcome.robot_traffic = ROBOT_TRAFFIC
    write_trial(trial, record)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    out = {}
    for name, spec in VARIANTS.items():
        trial = tmp_path_factory.mktemp(name)
        synthesize(trial, spec)
        if name == "captured":
            _captured(trial)
        out[name] = (trial / "analysis" / "metrics.json", analyze_trial(trial, plots=False))
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_what_analyze_writes_reads_back_through_the_schema_unchanged(analyzed, variant):
    path, written = analyzed[variant]
    metrics = read_metrics(path)
    assert isinstance(metrics, Metrics) and metrics.metrics_version == METRICS_VERSION
    # nothing lost or renamed: the model dumps to exactly the file's content
    assert metrics.model_dump(mode="json", exclude_unset=True) == json.loads(path.read_text())
    # analyze returns the typed metrics its readers read from the file
    assert isinstance(written, Metrics) and written == metrics


def test_typed_fields_carry_the_figures(analyzed):
    metrics = read_metrics(analyzed["complete"][0])
    assert metrics.drift.per_lap[-1].mean_m == pytest.approx(0.01, abs=1e-4)
    assert metrics.latency.one_way_ms.count > 0 and metrics.progress.complete and metrics.valid
    assert metrics.config == ("dds", "none", "loopback")


def test_the_recorded_sections_are_typed_too(analyzed):
    metrics = read_metrics(analyzed["captured"][0])
    assert metrics.wire is not None and metrics.wire.node == "robot"
    assert metrics.wire.host_to_robot.groups["user_data"].packets == 200
    assert list(metrics.wire.robot_to_host.kinds) == ["user_data"]  # the kinds seen
    assert metrics.wire.host_to_robot.kinds["user_data"].size_bytes.max == 150
    traffic = metrics.robot_traffic
    assert traffic is not None and traffic.preset == "rviz" and traffic.graph.participants == 2
    assert traffic.topics["/scan"].age_ms.p95 == 3.4 and traffic.topics["/scan"].lost_in_span == 0
    (fault,) = metrics.faults
    assert (fault.kind, fault.end_s, fault.open_ended, fault.model_extra) == (
        "outage",
        2.5,
        False,
        {"node": "robot"},
    )
    assert metrics.latency.faults[0].start_s == 2.0 and metrics.latency.faults[0].commands_sent > 0
    assert metrics.mocap.valid_poses > 0 and metrics.mocap.source.bag == "mocap"
    assert metrics.mocap.time.axis == "capture"
    assert read_metrics(analyzed["no-mocap"][0]).mocap.valid_poses is None


def _broken(tmp_path, analyzed, change, variant="complete") -> str:
    data = json.loads(analyzed[variant][0].read_text())
    change(data)
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    with pytest.raises(MetricsError) as err:
        read_metrics(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_unknown_or_missing_version_is_refused(tmp_path, analyzed):
    assert "metrics_version 99, this kit reads 1, 2" in _broken(
        tmp_path, analyzed, lambda d: d.update(metrics_version=99)
    )
    assert "metrics_version None" in _broken(tmp_path, analyzed, lambda d: d.pop("metrics_version"))


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d.pop("trial"), "trial: Field required"),
        (lambda d: d["drift"].update(available="maybe"), "drift.available"),
        (lambda d: d["progress"].update(laps_completed="three"), "progress.laps_completed"),
        (lambda d: d["latency"]["one_way_ms"].update(median="fast"), "latency.one_way_ms.median"),
        (lambda d: d.update(stack=[1, 2]), "stack"),
    ],
)
def test_a_malformed_section_names_the_field(tmp_path, analyzed, change, where):
    assert where in _broken(tmp_path, analyzed, change)


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda d: d["mocap"].update(valid_poses="all"), "mocap.valid_poses"),
        (lambda d: d["faults"][0].update(start_s="soon"), "faults.0.start_s"),
        (lambda d: d["wire"]["host_to_robot"].update(packets="many"), "wire.host_to_robot.packets"),
        (lambda d: d["robot_traffic"]["topics"]["/scan"].update(sent=[]), "robot_traffic.topics./scan.sent"),
        (lambda d: d["latency"]["faults"][0].pop("commands_lost"), "latency.faults.0.commands_lost"),
    ],
)
def test_a_malformed_recorded_section_names_the_field(tmp_path, analyzed, change, where):
    assert where in _broken(tmp_path, analyzed, change, "captured")


def test_not_json_or_missing_is_one_line(tmp_path):
    bad = tmp_path / "metrics.json"
    bad.write_text('{"metrics_version": 1,')
    with pytest.raises(MetricsError, match=f"^{bad}: not JSON"):
        read_metrics(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(MetricsError, match=f"^{bad}: not a metrics object"):
        read_metrics(bad)
    with pytest.raises(MetricsError, match="not readable"):
        read_metrics(tmp_path / "missing.json")


def test_version_1_files_are_still_read(tmp_path, analyzed):
    data = json.loads(analyzed["complete"][0].read_text())
    data["metrics_version"] = 1
    (data.get("stack") or {}).pop("forwarding", None)  # version 1 had no forwarding probe
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(data))
    assert read_metrics(path).metrics_version == 1


@pytest.mark.parametrize(
    "probe, row",
    [
        (
            {
                "samples": 400,
                "lost": 2,
                "rtt_p50_ms": 0.61,
                "rtt_p90_ms": 2.4,
                "rtt_p99_ms": 18.3,
                "rtt_max_ms": 39.7,
            },
            "| router/broker forwarding (probe round trip on its node) | p50 0.61 ms, p99 18.30 ms, max 39.70 ms; "
            "2 of 400 lost |",
        ),
        ({"samples": 30, "lost": 30}, "| router/broker forwarding | no probe sample came back (30 sent) |"),
    ],
)
def test_the_forwarding_probe_reaches_metrics_and_the_report(tmp_path, probe, row):
    from fieldtest.record.trial import read_trial, write_trial

    synthesize(tmp_path, VARIANTS["complete"])
    record = read_trial(tmp_path)
    record.outcome.stack["forwarding"] = probe
    write_trial(tmp_path, record)
    analyze_trial(tmp_path, plots=False)
    metrics = read_metrics(tmp_path / "analysis" / "metrics.json")
    assert metrics.stack.forwarding == probe
    assert row in (tmp_path / "analysis" / "report.md").read_text()
