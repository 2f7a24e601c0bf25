"""NatNet over real UDP on 127.0.0.1: emulator -> PyPI `natnet` client, emulator -> our recorder -> bag."""

from __future__ import annotations

import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from natnet import NatNetClient, Version

from fieldtest.machine import MachineMonitor, describe
from fieldtest.natnet import protocol as nn
from fieldtest.natnet import recorder as recorder_module
from fieldtest.natnet.axes import world_to_stream
from fieldtest.natnet.cli import main as natnet_main
from fieldtest.natnet.feed import PoseFeedSender
from fieldtest.natnet.recorder import MocapRecorder, MocapRecorderError, RecorderConfig
from fieldtest.natnet.server import EmulatorConfig, NatNetEmulator
from fieldtest.record import MOCAP_FRAMES_TOPIC, MOCAP_POSE_TOPIC, read_bag
from fieldtest.rosmsg import ns_of, quaternion_yaw

T0 = time.time()
NOISE_M = 0.0002
REPO = Path(__file__).resolve().parents[1]


def circle(t: float):
    """Robot driving a 0.8 m circle at 0.4 m/s, heading along the path (robot world, Z up)."""
    a = 0.5 * (t - T0)
    yaw = a + math.pi / 2
    return (1.5 + 0.8 * math.cos(a), 0.8 * math.sin(a), 0.05, 0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unicast_config(**overrides) -> EmulatorConfig:
    values = dict(
        rate_hz=240.0,
        multicast=False,
        bind_address="127.0.0.1",
        command_port=0,
        noise_m=NOISE_M,
        seed=1,
        history_size=100_000,
    )
    values.update(overrides)
    return EmulatorConfig(**values)


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def record_for(emulator: NatNetEmulator, bag_dir: Path, seconds: float, **overrides) -> MocapRecorder:
    values = dict(
        multicast=False,
        server_address="127.0.0.1",
        command_port=emulator.command_port,
        up_axis=emulator.config.up_axis,
        connect_timeout_s=5.0,
    )
    values.update(overrides)
    recorder = MocapRecorder(bag_dir, RecorderConfig(**values)).start()
    assert wait_for(lambda: recorder.stats.frames > 0), f"no frames: {recorder.stats.errors[:3]}"
    time.sleep(seconds)
    recorder.stop()
    return recorder


def check_bag_against_emulator(bag_dir: Path, emulator: NatNetEmulator, recorder: MocapRecorder):
    """Every recorded frame agrees with what the emulator did; returns (frames, poses, missing)."""
    bag = read_bag(bag_dir)
    assert not bag.truncated, bag.problem
    frames = bag.messages(MOCAP_FRAMES_TOPIC)
    poses = bag.messages(MOCAP_POSE_TOPIC)
    history = {r.frame_number: r for r in emulator.history}
    numbers = [m.frame_number for _, m in frames]
    assert numbers == sorted(set(numbers)), "frame numbers must arrive increasing and once"
    for _, msg in frames:
        truth = history[msg.frame_number]
        assert truth.sent
        assert msg.tracking_valid == truth.tracking_valid, msg.frame_number
        assert msg.header.frame_id == "mocap" and msg.rigid_body_id == emulator.config.rigid_body_id
    span = range(numbers[0], numbers[-1] + 1)
    missing = set(span) - set(numbers)
    # Gaps are exactly the frames the emulator did not send (loss, or skipped when late): none invented.
    assert missing == {n for n in span if n not in history or not history[n].sent}
    valid_frames = [(t, m) for t, m in frames if m.tracking_valid]
    assert len(poses) == len(valid_frames)  # invalid frames get no pose: nothing interpolated
    stats = recorder.stats
    assert (stats.frames, stats.valid, stats.missing) == (len(frames), len(poses), len(missing))
    assert stats.invalid == len(frames) - len(poses) and stats.parse_errors == 0
    return frames, poses, missing, history


# --- recorder against emulator ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "up_axis"), [(nn.NATNET_3_1, "y"), (nn.NATNET_4_1, "z"), (nn.NATNET_4_1, "y")]
)
def test_recorder_writes_bag_matching_source(tmp_path, version, up_axis):
    config = unicast_config(
        natnet_version=version,
        up_axis=up_axis,
        # after the emulator's start: late enough that a recorder connecting slowly still sees them
        invalid_windows=[(1.5, 1.6)],  # 24 frames occluded
        loss_windows=[(1.8, 1.85)],  # 12 frames not sent
    )
    with NatNetEmulator(circle, config) as emulator:
        recorder = record_for(emulator, tmp_path / "mocap", 2.0)
    assert recorder.server_info.natnet_version == version
    assert recorder.models.rigid_body(1).name == "turtlebot4"
    frames, poses, missing, history = check_bag_against_emulator(tmp_path / "mocap", emulator, recorder)
    invalid = [m.frame_number for _, m in frames if not m.tracking_valid]
    assert len(invalid) >= 12 and len(missing) >= 6, "the scheduled dropout windows were not recorded"

    valid_numbers = [m.frame_number for _, m in frames if m.tracking_valid]
    errors, yaw_errors, lags = [], [], []
    for number, (t_ns, pose) in zip(valid_numbers, poses, strict=True):
        truth = history[number]
        p = pose.pose.position
        errors.append(np.subtract((p.x, p.y, p.z), truth.true_pose[:3]))
        q = pose.pose.orientation
        yaw_error = quaternion_yaw(q.x, q.y, q.z, q.w) - quaternion_yaw(*truth.true_pose[3:])
        yaw_errors.append(math.remainder(yaw_error, 2 * math.pi))
        assert ns_of(pose.header.stamp) == t_ns and pose.header.frame_id == "mocap"
        lags.append(t_ns / 1e9 - truth.t_wall)
    errors = np.array(errors)
    print(
        f"NatNet {nn.version_text(version)} {up_axis}-up: {len(frames)} frames, {len(poses)} poses, "
        f"position error std {errors.std(axis=0) * 1e3} mm, receive lag median {np.median(lags) * 1e3:.2f} ms"
    )
    assert np.abs(errors).max() < 6 * NOISE_M  # within the configured noise (plus float32 rounding)
    assert 0.5 * NOISE_M < errors.std() < 1.5 * NOISE_M  # and the noise is really there
    assert max(abs(e) for e in yaw_errors) < 1e-4
    assert min(lags) >= 0 and np.median(lags) < 0.5  # stamped on receipt, after the frame's exposure


def test_frames_motive_skipped_after_catching_up_are_counted_missing(tmp_path):
    """Motive held up twice in a row (its machine loaded): first less than ``max_lag_s``, so it sends
    the frames it owes back to back, then past it, so it skips the frame numbers it missed and goes
    on at once. The frames either side of the skip then arrive together, and the skip still counts
    as missing frames (Motive's own frame timestamps say how much time it spans), not as a jump."""
    config = unicast_config()
    holds = [0.6 * config.max_lag_s, 1.2 * config.max_lag_s]  # one frame after the other
    armed = threading.Event()

    def stalling_circle(t: float):
        if armed.is_set() and holds:
            time.sleep(holds.pop(0))  # the pose of this frame comes late: the frame goes late
        return circle(t)

    with NatNetEmulator(stalling_circle, config) as emulator:
        recorder = MocapRecorder(
            tmp_path / "mocap",
            RecorderConfig(
                multicast=False, server_address="127.0.0.1", command_port=emulator.command_port,
                up_axis=config.up_axis, connect_timeout_s=5.0,
            ),
        ).start()  # fmt: skip
        assert wait_for(lambda: recorder.stats.frames > 0), f"no frames: {recorder.stats.errors[:3]}"
        armed.set()
        assert wait_for(lambda: not holds, 5.0)
        time.sleep(0.5)  # frames after the skip
        recorder.stop()
    assert not holds and emulator.frames_skipped_late > 0.5 * config.max_lag_s * config.rate_hz
    assert recorder.stats.jumps == 0, recorder.stats.summary()
    _, _, missing, _ = check_bag_against_emulator(tmp_path / "mocap", emulator, recorder)
    assert len(missing) >= emulator.frames_skipped_late


def test_random_dropouts_are_flagged_and_lost_frames_counted(tmp_path):
    config = unicast_config(invalid_probability=0.3, loss_probability=0.1, seed=7)
    with NatNetEmulator(circle, config) as emulator:
        recorder = record_for(emulator, tmp_path / "mocap", 1.0)
    frames, poses, missing, _ = check_bag_against_emulator(tmp_path / "mocap", emulator, recorder)
    invalid_share = 1 - len(poses) / len(frames)
    lost_share = len(missing) / (len(frames) + len(missing))
    print(f"invalid {invalid_share:.3f} (p=0.3), lost {lost_share:.3f} (p=0.1) over {len(frames)} frames")
    assert 0.18 < invalid_share < 0.42 and 0.03 < lost_share < 0.2


def test_high_rate_stream(tmp_path):
    """Absolute deadlines: the frame numbers keep pace with the clock however busy the machine is.
    They may trail it by the lag the emulator tolerates before it skips frames and by the longest
    pause the machine imposed meanwhile (a reference timer measures it in the same window)."""
    rate = 500.0
    config = unicast_config(rate_hz=rate, history_size=0)
    with MachineMonitor(period_s=0.002) as machine, NatNetEmulator(circle, config) as emulator:
        recorder = record_for(emulator, tmp_path / "mocap", 1.0)
        numbered = emulator.frames_generated + emulator.frames_skipped_late
        due = (time.time() - emulator.started_wall) * rate
    stats = recorder.stats
    pause_s = machine.report()["timer_late_max_ms"] / 1e3
    print(
        f"{rate:g} Hz: {numbered} frames numbered of {due:.0f} due, {emulator.frames_skipped_late} skipped "
        f"late, {stats.frames} recorded, {stats.missing} missing; {describe(machine.report())}"
    )
    assert due - (config.max_lag_s + pause_s) * rate - 2 <= numbered <= due + 1
    assert stats.frames > 0.5 * rate * 1.0 and stats.parse_errors == 0


def test_recorder_reports_missing_server(tmp_path):
    config = RecorderConfig(multicast=False, command_port=free_udp_port(), connect_timeout_s=0.5)
    recorder = MocapRecorder(tmp_path / "mocap", config)
    with pytest.raises(MocapRecorderError, match=r"no NatNet server answered NAT_CONNECT at 127\.0\.0\.1"):
        recorder.run()
    assert (tmp_path / "mocap" / "metadata.yaml").is_file()  # the (empty) bag was still closed


# --- the third-party client (PyPI natnet) against the emulator ----------------------------------------


def test_pypi_natnet_client_receives_emulator_stream():
    frames, descriptions = [], []
    with NatNetEmulator(circle, unicast_config()) as emulator:
        client = NatNetClient(
            server_ip_address="127.0.0.1",
            local_ip_address="127.0.0.1",
            use_multicast=False,
            command_port=emulator.command_port,
        )
        client.on_data_frame_received_event.handlers.append(frames.append)
        client.on_data_description_received_event.handlers.append(descriptions.append)
        client.connect(timeout=5.0)
        try:
            client.run_async()
            client.request_modeldef()
            assert wait_for(lambda: len(frames) >= 100 and descriptions)
        finally:
            client.shutdown()
        history = {r.frame_number: r for r in emulator.history}
    assert descriptions[0].rigid_bodies[0].name == "turtlebot4"
    for frame in frames[:100]:
        truth = history[frame.prefix.frame_number]
        body = frame.rigid_bodies[0]
        assert body.id_num == 1 and body.tracking_valid
        stream_pos, stream_rot = world_to_stream(truth.true_pose[:3], truth.true_pose[3:], "y")
        assert np.abs(np.subtract(body.pos, stream_pos)).max() < 6 * NOISE_M
        assert np.abs(np.subtract(body.rot, stream_rot)).max() < 1e-5


def test_pypi_natnet_client_sees_natnet_version():
    with NatNetEmulator(circle, unicast_config(natnet_version=nn.NATNET_3_1)) as emulator:
        client = NatNetClient(
            server_ip_address="127.0.0.1",
            local_ip_address="127.0.0.1",
            use_multicast=False,
            command_port=emulator.command_port,
        )
        client.connect(timeout=5.0)
        try:
            assert client.server_info.nat_net_protocol_version == Version(3, 1, 0, 0)
            assert client.server_info.application_name == "Motive"
        finally:
            client.shutdown()


# --- multicast on loopback ------------------------------------------------------------------------------


def test_multicast_stream_to_recorder_and_pypi_client(tmp_path):
    group, port = nn.DEFAULT_MULTICAST_ADDRESS, free_udp_port()
    try:
        problem = _probe_multicast(group, port)
    except OSError as exc:
        problem = str(exc)
    if problem:
        pytest.fail(f"multicast over loopback is needed: {problem}", pytrace=False)
    config = unicast_config(multicast=True, data_port=port, multicast_address=group)
    pypi_frames = []
    with NatNetEmulator(circle, config) as emulator:
        client = NatNetClient(
            server_ip_address="127.0.0.1",
            local_ip_address="127.0.0.1",
            multicast_address=group,
            command_port=emulator.command_port,
            data_port=port,
            use_multicast=True,
        )
        client.on_data_frame_received_event.handlers.append(pypi_frames.append)
        client.connect(timeout=5.0)
        try:
            client.run_async()
            recorder = record_for(
                emulator, tmp_path / "mocap", 0.8, multicast=True, local_address="127.0.0.1", data_port=port
            )
        finally:
            client.shutdown()
    frames, poses, missing, _ = check_bag_against_emulator(tmp_path / "mocap", emulator, recorder)
    print(f"{len(frames)} frames recorded, {len(missing)} not sent (emulator late on a busy machine: "
          f"{emulator.frames_skipped_late} skipped), {len(pypi_frames)} at the PyPI client")  # fmt: skip
    # Gaps may only be frames the emulator itself skipped (checked above), never lost on the way: on a
    # busy machine the emulator skips what it could not send on time, so counts are not judged.
    assert len(poses) >= 20
    # a second client on the same host gets the same stream: every frame the recorder got
    recorded = {m.frame_number for _, m in frames}
    assert recorded <= {f.prefix.frame_number for f in pypi_frames}


def _probe_multicast(group: str, port: int) -> str | None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        rx.bind(("", port))
        membership = socket.inet_aton(group) + socket.inet_aton("127.0.0.1")
        rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
        tx.sendto(b"probe", (group, port))
        ready, _, _ = select.select([rx], [], [], 1.0)
        return None if ready else "no multicast datagram came back over loopback"
    finally:
        rx.close()
        tx.close()


# --- the command line, as separate OS processes ----------------------------------------------------------


def _start(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "fieldtest.natnet", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _first_line(proc: subprocess.Popen, timeout_s: float = 15.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, f"{proc.args} printed nothing within {timeout_s} s"
    return proc.stdout.readline()


def _terminate(proc: subprocess.Popen) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


def test_cli_serve_with_pose_feed_and_record_until_sigterm(tmp_path):
    command_port, feed_port = free_udp_port(), free_udp_port()
    bag_dir = tmp_path / "mocap"
    server = _start(
        ["serve", "--mode", "unicast", "--bind", "127.0.0.1", "--command-port", str(command_port),
         "--source", "feed", "--feed-port", str(feed_port), "--rate", "200", "--up-axis", "y"]
    )  # fmt: skip
    recorder = None
    try:
        assert "NatNet emulator" in _first_line(server)
        recorder = _start(
            ["record", str(bag_dir), "--mode", "unicast", "--server", "127.0.0.1",
             "--command-port", str(command_port), "--up-axis", "y"]
        )  # fmt: skip
        assert "mocap recorder" in _first_line(recorder)
        t0 = time.time()
        with PoseFeedSender("127.0.0.1", feed_port) as feed:
            while time.time() - t0 < 1.2:  # the twin robot: a straight line at 0.3 m/s, 100 Hz steps
                now = time.time()
                feed.send((0.3 * (now - t0), 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), t=now)
                time.sleep(0.01)
        rec_code, rec_out, rec_err = _terminate(recorder)
    finally:
        if recorder is not None and recorder.poll() is None:
            recorder.kill()
            recorder.communicate()
        srv_code, srv_out, srv_err = _terminate(server)
    assert rec_code == 0, rec_err
    assert srv_code == 0, srv_err
    assert "frames" in rec_out and "frames generated" in srv_out
    bag = read_bag(bag_dir)
    assert not bag.truncated, bag.problem  # SIGTERM closed the bag properly
    poses = bag.messages(MOCAP_POSE_TOPIC)
    assert len(poses) > 80
    xs = np.array([m.pose.position.x for _, m in poses])
    expected = np.array([0.3 * (t / 1e9 - t0) for t, _ in poses])
    # Stamped on receipt, the pose lags the feed by the emulator's interpolation and transit only.
    print(f"CLI feed: {len(poses)} poses, x - 0.3 t: median {np.median(xs - expected) * 1e3:.2f} mm")
    assert np.abs(xs - expected).max() < 0.03
    assert max(abs(m.pose.position.y) for _, m in poses) < 0.002  # Y-up undone: the line stays on y = 0


def test_cli_rejects_bad_settings(capsys):
    assert natnet_main(["serve", "--source", "static", "--natnet-version", "2.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NatNet 2.9.0.0 is not supported" in err
    assert natnet_main(["serve", "--source", "static", "--rate", "0"]) == 2
    assert "rate 0.0 Hz" in capsys.readouterr().err
    assert natnet_main(["serve", "--source", "static", "--static-pose", "1,2", "--command-port", "0"]) == 2
    assert "--static-pose '1,2'" in capsys.readouterr().err


def test_frames_are_stamped_on_arrival_not_when_read():
    if not recorder_module._KERNEL_STAMPS:
        pytest.fail("kernel receive stamps are needed: only on x86-64/arm64 Linux", pytrace=False)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def send_and_read(busy_s: float = 0.0) -> tuple[int, int, int, int]:
        """(sent, seen queued, read begun, stamp) of one datagram, all on the wall clock."""
        sent_ns = time.time_ns()
        tx.sendto(b"frame", rx.getsockname())
        assert select.select([rx], [], [], 5.0)[0], "the datagram never arrived"
        seen_ns = time.time_ns()
        time.sleep(busy_s)  # the recorder is busy elsewhere
        read_ns = time.time_ns()
        _, ancillary, _, _ = rx.recvmsg(100, recorder_module._ANCILLARY_BYTES)
        return sent_ns, seen_ns, read_ns, recorder_module._arrival_ns(ancillary)

    try:
        rx.bind(("127.0.0.1", 0))
        recorder_module._enable_kernel_stamps(rx)
        # Linux switches receive stamping on in deferred work (the recorder connects first); until
        # then a datagram is stamped when read: wait for one stamped before it was seen queued
        deadline = time.monotonic() + 5.0
        while (warm := send_and_read())[3] >= warm[1] and time.monotonic() < deadline:
            pass
        sent_ns, seen_ns, read_ns, stamp = send_and_read(busy_s=0.3)
    finally:
        rx.close()
        tx.close()
    # stamped between its send and the moment it was seen queued, before the late read began
    assert sent_ns <= stamp <= seen_ns < read_ns, (stamp - sent_ns, seen_ns - stamp, read_ns - stamp)
