"""The kit's DDS endpoints announce themselves as a ROS 2 node on ros_discovery_info, with the GID
size of the distro (what rmw_cyclonedds does; zenoh-bridge-ros2dds routes nothing else)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from cyclonedds.domain import DomainParticipant
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from fieldtest import rosmsg
from fieldtest.middleware.dds.transport import open_dds
from fieldtest.procs import lease_dds_domain
from fieldtest.transport import TransportConfig
from fieldtest.transport.rosgraph import (
    ROS_DISCOVERY_TOPIC,
    gid_bytes,
    gid_size,
    participant_info_class,
)

# A DDS domain of this test process's own, leased until it exits: a parallel run on this machine
# (another test worker, a demo) never shares it.
DDS_DOMAIN = lease_dds_domain(100 + os.getpid() % 100)


@pytest.mark.parametrize(
    ("distro", "size"),
    [("humble", 24), ("galactic", 24), ("iron", 16), ("jazzy", 16), ("kilted", 16), ("", 16)],
)
def test_gid_size_follows_the_distro(monkeypatch, distro, size):
    monkeypatch.setenv("ROS_DISTRO", distro)
    assert gid_size() == size
    guid = bytes(range(1, 17))
    assert gid_bytes(guid) == guid + b"\0" * (size - 16)


def _latest_info(reader: DataReader, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    latest = None
    while time.monotonic() < deadline:
        for sample in reader.take(10):
            latest = sample
        if (
            latest is not None
            and latest.node_entities_info_seq
            and latest.node_entities_info_seq[0].reader_gid_seq
        ):
            return latest
        time.sleep(0.02)
    return latest


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
def test_transport_lists_its_readers_and_writers_as_one_node(monkeypatch, distro):
    monkeypatch.setenv("ROS_DISTRO", distro)
    config = TransportConfig(domain_id=DDS_DOMAIN.domain_id, namespace=f"/t{uuid.uuid4().hex[:8]}")
    transport = open_dds(config, "robot")
    other = DomainParticipant(config.domain_id)
    try:
        qos = Qos(
            Policy.Reliability.Reliable(0), Policy.Durability.TransientLocal, Policy.History.KeepLast(1)
        )
        reader = DataReader(other, Topic(other, ROS_DISCOVERY_TOPIC, participant_info_class(distro)), qos=qos)
        transport.publisher("/fieldtest/clock_probe", rosmsg.CLOCK_PROBE)
        transport.subscribe("/cmd_vel", rosmsg.TWIST_STAMPED, lambda _msg: None)
        info = _latest_info(reader)
        assert info is not None, "no ParticipantEntitiesInfo on ros_discovery_info"
        size = 24 if distro == "humble" else 16
        assert bytes(info.gid.data) == transport.participant.guid.bytes + b"\0" * (size - 16)
        (node,) = info.node_entities_info_seq
        assert (node.node_namespace, node.node_name) == (config.namespace, "fieldtest_robot")
        writers = {bytes(g.data) for g in node.writer_gid_seq}
        readers = {bytes(g.data) for g in node.reader_gid_seq}
        assert writers == {gid_bytes(w.guid.bytes, distro) for _, w in transport._writers}
        assert readers == {gid_bytes(r.guid.bytes, distro) for _, r, *_ in transport._readers}
        assert len(writers) == len(readers) == 1
    finally:
        transport.close()
        other.__del__()
