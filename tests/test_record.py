import signal
import subprocess
import sys
import textwrap
import time

import pytest
from rosbags.rosbag2 import Reader

from fieldtest import rosmsg
from fieldtest.record import (
    CMD_VEL_TOPIC,
    BagError,
    BagWriter,
    TrialFormatError,
    TrialRecord,
    TrialRequest,
    read_bag,
    read_trial,
    repair_bag,
    write_trial,
)


def _write_commands(bag_dir, n, background=False):
    with BagWriter(bag_dir, background=background) as writer:
        for i in range(n):
            t = 1_000_000_000 + i * 50_000_000
            writer.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, t, rosmsg.command(i, t, 0.33, 0.1))


@pytest.mark.parametrize("background", [False, True], ids=["inline", "writer-thread"])
def test_bag_round_trip_and_rosbags_opens_it(tmp_path, background):
    _write_commands(tmp_path / "host", 200, background)
    data = read_bag(tmp_path / "host")
    assert not data.truncated
    msgs = data.messages(CMD_VEL_TOPIC)
    assert [rosmsg.seq_of(m.header.frame_id) for _, m in msgs] == list(range(200))
    assert msgs[5][1].twist.angular.z == pytest.approx(0.1)
    with Reader(tmp_path / "host") as reader:  # rosbag2's own layout: metadata.yaml + MCAP
        assert reader.message_count == 200
        assert [c.msgtype for c in reader.connections] == [rosmsg.TWIST_STAMPED]


@pytest.mark.parametrize("background", [False, True], ids=["inline", "writer-thread"])
def test_killed_writer_leaves_a_bag_readable_up_to_the_cut(tmp_path, background):
    code = textwrap.dedent(f"""
        import sys, time
        from fieldtest import rosmsg
        from fieldtest.record import BagWriter
        w = BagWriter({str(tmp_path / "cut")!r}, flush_interval_s=0.05, background={background})
        for i in range(100000):
            w.write("/cmd_vel", rosmsg.TWIST_STAMPED, time.time_ns(), rosmsg.command(i, time.time_ns(), 0.3, 0.0))
            if i == 50:
                print("WRITING", flush=True)
            time.sleep(0.002)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "WRITING"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    data = read_bag(tmp_path / "cut")
    assert data.truncated
    seqs = [rosmsg.seq_of(m.header.frame_id) for _, m in data.messages(CMD_VEL_TOPIC)]
    assert len(seqs) > 50 and seqs == list(range(len(seqs)))
    repair_bag(tmp_path / "cut")
    repaired = read_bag(tmp_path / "cut")
    assert not repaired.truncated and repaired.count(CMD_VEL_TOPIC) == len(seqs)


def test_background_writer_flushes_on_request_and_reports_its_failures(tmp_path):
    writer = BagWriter(tmp_path / "bg", background=True)
    for i in range(20):
        writer.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, 1_000 + i, rosmsg.command(i, 1_000 + i, 0.3, 0.0))
    writer.flush()
    assert read_bag(tmp_path / "bg").count(CMD_VEL_TOPIC) == 20  # readable mid-recording
    writer.write(CMD_VEL_TOPIC, rosmsg.TWIST, 2_000, rosmsg.twist(0.3, 0.0))  # wrong type
    writer.flush()
    with pytest.raises(BagError, match="bg_0.mcap: writer thread failed: .*/cmd_vel is"):
        writer.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, 3_000, rosmsg.command(99, 3_000, 0.3, 0.0))
    with pytest.raises(BagError, match="writer thread failed"):
        writer.close()
    data = read_bag(tmp_path / "bg")  # what was recorded before the failure is kept, and closed
    assert not data.truncated and data.count(CMD_VEL_TOPIC) == 20
    with pytest.raises(BagError, match="write after close"):
        writer.write(CMD_VEL_TOPIC, rosmsg.TWIST_STAMPED, 4_000, rosmsg.command(1, 4_000, 0.3, 0.0))


def test_missing_and_garbage_bags_give_one_line_errors(tmp_path):
    with pytest.raises(BagError, match="no such bag"):
        read_bag(tmp_path / "nothing")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "junk_0.mcap").write_bytes(b"not an mcap file at all")
    with pytest.raises(BagError, match="junk_0.mcap") as err:
        read_bag(tmp_path / "junk")
    assert "\n" not in str(err.value)


def test_trial_yaml_round_trip_and_errors(tmp_path):
    record = TrialRecord(trial_id="t1", request=TrialRequest(name="t1", seed=7))
    write_trial(tmp_path, record)
    assert read_trial(tmp_path) == record
    text = (tmp_path / "trial.yaml").read_text()
    (tmp_path / "trial.yaml").write_text(text.replace("format_version: 1", "format_version: 99"))
    with pytest.raises(TrialFormatError, match="unknown format_version 99"):
        read_trial(tmp_path)
    (tmp_path / "trial.yaml").write_text(text.replace("laps: 4", "laps: 0"))
    with pytest.raises(TrialFormatError, match="trial.yaml"):
        read_trial(tmp_path)
    with pytest.raises(TrialFormatError, match="missing"):
        read_trial(tmp_path / "elsewhere")
