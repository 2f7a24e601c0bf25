"""The clock probes (robot -> host -> robot), which the host's lost-robot watchdog listens for,
travel best effort whatever the trial's QoS, on the lab nodes and on mqtt_client's ROS side alike;
the commands keep the trial's QoS. On RELIABLE a lost probe waited for the Fast DDS writer's next
heartbeat (3 s) with the later probes behind it, and the 2 s watchdog stopped the trial
(tests/test_lab_two_machines_wifi.py runs that on two machines)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fieldtest.labrun.configuration.launchsettings import parse_launch_args
from fieldtest.labrun.rehearsal.labrehearsal import ROS_VENV, ros_python
from fieldtest.middleware import registry
from fieldtest.middleware.labshared import link_topics, ros_topic, topic_qos
from fieldtest.middleware.mqtt.lab import mqtt_client_params
from fieldtest.qos import CLOCK_PROBE_QOS, QOS_NAMES, get_qos, mqtt_qos
from fieldtest.record.recordnames import CLOCK_PROBE_REPLY_TOPIC, CLOCK_PROBE_TOPIC, CMD_VEL_TOPIC

PROBES = (CLOCK_PROBE_TOPIC, CLOCK_PROBE_REPLY_TOPIC)
MQTT_MIDDLEWARES = [m for m in registry.names(lab=True) if registry.get(m).lab_bridge == "mqtt_client"]
QOS_PROBE = Path(__file__).parent / "ros" / "probe_qos_probe.py"


@pytest.mark.parametrize("qos", QOS_NAMES)
def test_the_probes_have_their_own_best_effort_qos_and_the_commands_the_trials(qos):
    for probe in PROBES:
        assert get_qos(topic_qos(probe, qos)).reliability == "best_effort"
        assert topic_qos(probe.lstrip("/"), qos) == topic_qos(probe, qos)  # relative names too
    assert topic_qos(CMD_VEL_TOPIC, qos) == qos


@pytest.mark.parametrize("qos", QOS_NAMES)
@pytest.mark.parametrize("middleware", MQTT_MIDDLEWARES)
@pytest.mark.parametrize("role", ["host", "robot"])
@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_mqtt_client_carries_the_probes_best_effort_and_the_commands_at_the_trials_qos(
    qos, middleware, role, distro
):
    """mqtt_client's ROS subscription must match the node's best-effort probe publisher (a reliable
    one never does), and its publisher must not hold the probes for repair either."""
    cfg = parse_launch_args(
        {"middleware": middleware, "qos": qos, "namespace": "/tb4", "ros_distro": distro}, role, environ={}
    )
    bridge = mqtt_client_params(cfg)["/**"]["ros__parameters"]["bridge"]
    blocks = {
        **bridge["ros2mqtt"],
        **{
            bridge["mqtt2ros"][k]["ros_topic"]: bridge["mqtt2ros"][k]
            for k in bridge["mqtt2ros"]["mqtt_topics"]
        },
    }
    seen = set()
    for t in link_topics(cfg):
        block = blocks[ros_topic(cfg, t.topic)]
        wanted = get_qos(CLOCK_PROBE_QOS if t.topic in PROBES else qos)
        ros = block["advanced"]["ros"]
        assert (ros["qos"]["reliability"], ros["queue_size"]) == (wanted.reliability, wanted.depth), t
        assert block["advanced"]["mqtt"]["qos"] == mqtt_qos(wanted.name), t
        seen.add(t.topic)
    assert set(PROBES) <= seen


@pytest.mark.parametrize("qos", ["default", "fernandez-e", "sensor"])
def test_the_lab_nodes_transport_makes_the_probes_best_effort_on_the_ros_graph(qos):
    """The nodes' rclpy transport, read back from the ROS graph (ROS 2 wheels, Fast DDS)."""
    done = subprocess.run(
        [ros_python(ROS_VENV), str(QOS_PROBE), qos], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    graph = json.loads(done.stdout.strip().splitlines()[-1])
    for probe in PROBES:
        assert graph[probe] == {"publisher": "best_effort", "subscription": "best_effort"}, graph
    reliability = get_qos(qos).reliability
    assert graph[CMD_VEL_TOPIC] == {"publisher": reliability, "subscription": reliability}, graph
