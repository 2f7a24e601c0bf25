"""The simulated Create 3 base of the lab rehearsals (fieldtest.labrun.rehearsal.simbase) over a real
CycloneDDS link: what it took, as its record (base/commands.csv) says. A middleware test: its own
tier and group, not the fast tier (CycloneDDS's first import alone runs ldconfig)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from fieldtest import rosmsg
from fieldtest.labrun.rehearsal.simbase import SimulatedBase
from fieldtest.middleware.registry import open_transport
from fieldtest.procs import lease_dds_domain
from fieldtest.record import CMD_VEL_TOPIC
from fieldtest.record.basecommands import BaseCommandLog, read_base_commands
from fieldtest.transport.base import TransportConfig


def test_the_simulated_base_records_what_it_takes_over_dds(tmp_path):
    with lease_dds_domain(100 + os.getpid() % 100) as lease:
        _records_what_it_takes(TransportConfig(domain_id=lease.domain_id), tmp_path / "commands.csv")


def _records_what_it_takes(config: TransportConfig, path: Path) -> None:
    host, robot = open_transport(config, "host"), open_transport(config, "robot")
    log = BaseCommandLog(path)
    try:
        SimulatedBase(robot, cmd_type="twist_stamped", record=log)
        send = host.publisher(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED)
        assert host.wait_for_match(CMD_VEL_TOPIC, timeout_s=10.0)
        for seq in range(10):
            send(rosmsg.command(seq, time.time_ns(), 0.1 * seq, -0.2))
            time.sleep(0.005)
        deadline = time.monotonic() + 10.0
        while len(read_base_commands(path).seq) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = read_base_commands(path)
        assert list(got.seq) == list(range(10)) and got.stamped.all()
        np.testing.assert_allclose(got.linear, 0.1 * np.arange(10))
        assert np.all(got.angular == -0.2) and np.all(got.received_ns >= got.stamp_ns)
        assert got.taken_ns is not None and np.all(got.taken_ns >= got.received_ns)
    finally:
        log.close()
        host.close()
        robot.close()
