"""The recorder refuses what it cannot read, at once and loudly, and counts frame numbers right.

A scripted NatNet server on 127.0.0.1 (real UDP) answers NAT_CONNECT with a chosen version and sends
the frames a test gives it, so versions, layouts and frame numbers no emulator produces can be sent."""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest

from fieldtest.natnet import protocol as nn
from fieldtest.natnet.recorder import MocapRecorder, MocapRecorderError, RecorderConfig
from fieldtest.natnet.server import EmulatorConfig, NatNetEmulator
from fieldtest.record import MOCAP_FRAMES_TOPIC, read_bag


class ScriptedServer:
    """Answers NAT_CONNECT with NAT_SERVERINFO of ``version``; ``send`` delivers frames to the client."""

    def __init__(self, version: nn.Version, app_version: nn.Version = (3, 1, 0, 0)):
        self.info = nn.ServerInfo(app_version=app_version, natnet_version=version, multicast=False)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.client: tuple[str, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                packet, addr = self.sock.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            if nn.unpack_message(packet)[0] == nn.NAT_CONNECT:
                self.client = addr
                self.sock.sendto(nn.pack_server_info(self.info), addr)

    def send(self, message: bytes) -> None:
        assert self.client is not None
        self.sock.sendto(message, self.client)
        time.sleep(0.002)  # keep the order on loopback

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def server_factory():
    servers = []

    def make(version, **kw):
        servers.append(ScriptedServer(version, **kw))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def _recorder(tmp_path, port: int, **overrides) -> MocapRecorder:
    values = dict(multicast=False, server_address="127.0.0.1", command_port=port, connect_timeout_s=3.0)
    return MocapRecorder(tmp_path / "mocap", RecorderConfig(**(values | overrides)))


def _one_body_frame(number: int, version: nn.Version) -> bytes:
    body = nn.RigidBody(1, (0.5, 0.1, -0.2), (0.0, 0.0, 0.0, 1.0))
    return nn.pack_frame(nn.Frame(frame_number=number, rigid_bodies=[body], timestamp=number / 120), version)


def _wait(condition, timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not condition():
        time.sleep(0.01)
    assert condition()


@pytest.mark.parametrize("version", [(2, 10, 0, 0), (2, 5, 0, 0), (1, 7, 0, 0)], ids=nn.version_text)
def test_a_natnet_2_server_is_refused_at_once(tmp_path, server_factory, version):
    server = server_factory(version, app_version=(1, 10, 0, 0))
    recorder = _recorder(tmp_path, server.port)
    began, duration_s = time.monotonic(), 30.0
    with pytest.raises(
        MocapRecorderError, match=rf"streams NatNet {nn.version_text(version)}: not supported"
    ):
        recorder.run(duration_s=duration_s)
    # at once: not after recording (judged against the run's length, not against the machine's speed)
    assert time.monotonic() - began < duration_s / 2
    assert recorder.stats.frames == 0 and "not supported" in recorder.stats.summary()


@pytest.mark.parametrize(
    ("streamed", "configured"),
    [(nn.NATNET_4_1, nn.NATNET_3_1), (nn.NATNET_4_1, (4, 0, 0, 0)), (nn.NATNET_3_1, nn.NATNET_4_1)],
    ids=lambda v: nn.version_text(v),
)
def test_a_configured_version_the_server_does_not_stream_is_refused(tmp_path, streamed, configured):
    config = EmulatorConfig(
        rate_hz=120.0, natnet_version=streamed, multicast=False, bind_address="127.0.0.1", command_port=0
    )
    with NatNetEmulator(lambda t: (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), config) as emulator:
        recorder = _recorder(tmp_path, emulator.command_port, natnet_version=configured)
        with pytest.raises(MocapRecorderError, match="frames would be misread"):
            recorder.run(duration_s=5.0)
    assert recorder.stats.absent == 0 and recorder.stats.frames == 0


@pytest.mark.parametrize("bodies", [1, 2])
def test_frames_of_another_layout_stop_the_recorder_instead_of_recording_absent_bodies(
    tmp_path, server_factory, bodies
):
    """As with a version override on multicast, or Motive's bitstream changed mid-session: the server
    said 3.1, the frames are 4.1 (section sizes). Read as 3.x they used to give zero rigid bodies."""
    server = server_factory(nn.NATNET_3_1)
    recorder, thread, errors = _connected(tmp_path, server)
    body = [nn.RigidBody(i + 1, (0.5, 0.1, -0.2), (0.0, 0.0, 0.0, 1.0)) for i in range(bodies)]
    server.send(nn.pack_frame(nn.Frame(frame_number=7, rigid_bodies=body), nn.NATNET_4_1))
    thread.join(5.0)
    assert errors and errors[0] is not None and "the first frame" in errors[0], errors
    assert recorder.stats.absent == 0 and recorder.stats.frames == 0


def _connected(tmp_path, server: ScriptedServer, duration_s: float = 5.0):
    """A recorder running in a thread, connected to ``server``; its error (or None) lands in the list."""
    recorder = _recorder(tmp_path, server.port)
    errors: list[str | None] = []

    def run() -> None:
        try:
            recorder.run(duration_s=duration_s)
        except MocapRecorderError as exc:
            errors.append(str(exc))
        else:
            errors.append(None)

    thread = threading.Thread(target=run)
    thread.start()
    _wait(lambda: server.client is not None and recorder.server_info is not None)
    return recorder, thread, errors


def test_a_stream_that_changes_layout_mid_session_stops_after_a_short_run(tmp_path, server_factory):
    server = server_factory(nn.NATNET_3_1)
    recorder, thread, errors = _connected(tmp_path, server)
    for n in range(1, 21):
        server.send(_one_body_frame(n, nn.NATNET_3_1))
    server.send(b"\x07\x00\x05\x00garbage")  # one corrupt datagram among good frames: counted, not fatal
    server.send(_one_body_frame(21, nn.NATNET_3_1))
    _wait(lambda: recorder.stats.frames == 21)
    assert recorder.stats.fatal is None and recorder.stats.parse_errors == 1
    for n in range(22, 40):
        server.send(_one_body_frame(n, nn.NATNET_4_1))
    thread.join(5.0)
    assert errors[0] is not None and "10 frames in a row" in errors[0]
    assert recorder.stats.absent == 0 and recorder.stats.valid == 21
    frames = read_bag(tmp_path / "mocap").messages(MOCAP_FRAMES_TOPIC)
    assert [m.frame_number for _, m in frames] == list(range(1, 22))  # what was read is kept


def test_frame_numbers_restart_and_garbage_are_jumps_not_loss_or_disorder(tmp_path, server_factory):
    server = server_factory(nn.NATNET_4_1)
    recorder, thread, _ = _connected(tmp_path, server, duration_s=30.0)
    numbers = list(range(1000, 1050))
    numbers += [2_147_480_000]  # a garbage number
    numbers += list(range(1050, 1061)) + [1062, 1061, 1063]  # 1061 late: missing when skipped, then late
    numbers += list(range(1066, 1080))  # two lost (1064, 1065)
    numbers += list(range(1, 40))  # Motive restarted
    for n in numbers:
        server.send(_one_body_frame(n, nn.NATNET_4_1))
    _wait(lambda: recorder.stats.frames == len(numbers))
    recorder._stop.set()
    thread.join(5.0)
    stats = recorder.stats
    assert (stats.missing, stats.out_of_order, stats.jumps) == (3, 1, 3), stats.summary()
    assert stats.valid == len(numbers) and stats.last_frame == 39


@pytest.mark.parametrize(
    ("natnet", "motive"),
    [
        ((3, 0, 0, 0), (2, 0)),
        ((3, 1, 0, 0), (2, 1)),
        ((4, 0, 0, 0), (3, 0)),
        ((4, 1, 0, 0), (3, 1)),
        ((4, 2, 0, 0), (3, 2)),
    ],
)
def test_the_emulator_reports_the_motive_release_of_its_natnet_version(natnet, motive):
    config = EmulatorConfig(natnet_version=natnet, multicast=False, bind_address="127.0.0.1", command_port=0)
    with NatNetEmulator(lambda t: None, config) as emulator:
        assert emulator.server_info().app_version[:2] == motive


def test_a_bitstream_change_mid_session_is_followed_when_the_server_says_so(tmp_path, server_factory):
    """Motive switched from 3.1 to 4.1: the first unreadable frame makes the recorder ask again."""
    server = server_factory(nn.NATNET_3_1)
    recorder, thread, errors = _connected(tmp_path, server)
    for n in range(1, 11):
        server.send(_one_body_frame(n, nn.NATNET_3_1))
    _wait(lambda: recorder.stats.frames == 10)
    server.info = nn.ServerInfo(natnet_version=nn.NATNET_4_1, multicast=False)
    server.send(_one_body_frame(11, nn.NATNET_4_1))  # unreadable as 3.1: the recorder asks again
    _wait(lambda: recorder.version == nn.NATNET_4_1)
    for n in range(12, 30):
        server.send(_one_body_frame(n, nn.NATNET_4_1))
    _wait(lambda: recorder.stats.frames == 28)
    recorder._stop.set()
    thread.join(5.0)
    assert errors == [None]
    assert (recorder.stats.valid, recorder.stats.parse_errors, recorder.stats.absent) == (28, 1, 0)
    assert recorder.stats.missing == 1  # frame 11, the one read with the old layout


def test_capture_stamps_are_recorded_and_map_the_receipt_jitter_away(tmp_path, server_factory):
    """Frames sent 0-15 ms late at random, their NatNet timestamp on a clock 250 ppm fast: the recorder
    keeps each frame's own timestamp beside its receipt stamp, and the analysis puts the poses on
    the capture schedule (one constant delay) where the receipt stamps scatter by the jitter."""
    import random

    import numpy as np

    from fieldtest.analysis.loading.trialdata import load_trial
    from fieldtest.plan import SquarePlan
    from fieldtest.testkit.synth import SynthSpec, synthesize

    synthesize(tmp_path, SynthSpec(plan=SquarePlan(laps=1, side_duration_s=1.5)))
    shutil.rmtree(tmp_path / "mocap")  # the trial's mocap bag comes from the recorder instead
    server = server_factory(nn.NATNET_4_1)
    recorder, thread, _ = _connected(tmp_path, server, duration_s=8.0)
    period_s, late = 0.02, random.Random(7)
    body = nn.RigidBody(1, (0.5, 0.1, -0.2), (0.0, 0.0, 0.0, 1.0))
    start_ns, schedule = time.time_ns() + 50_000_000, []
    for k in range(250):
        due_ns = start_ns + round(k * period_s * 1e9)
        send_ns = due_ns + round(late.uniform(0.0, 0.015) * 1e9)
        time.sleep(max(0.0, (send_ns - time.time_ns()) / 1e9))
        stamp = 40.0 + k * period_s * (1 + 250e-6)
        frame = nn.Frame(frame_number=500 + k, rigid_bodies=[body], timestamp=stamp)
        server.sock.sendto(nn.pack_frame(frame, nn.NATNET_4_1), server.client)
        schedule.append(due_ns)
    _wait(lambda: recorder.stats.frames == 250)
    recorder.stop()
    thread.join(10.0)
    frames = read_bag(tmp_path / "mocap").messages(MOCAP_FRAMES_TOPIC)
    assert [m.mocap_timestamp_s for _, m in frames] == [
        40.0 + k * period_s * (1 + 250e-6) for k in range(250)
    ]

    due = np.array(schedule)
    capture = load_trial(tmp_path).poses.t_ns - due
    assert np.ptp(capture) < 3e6, np.ptp(capture)  # ns: one constant delay (the fastest frame's), fit error
    receipt = load_trial(tmp_path, mocap_time="receipt").poses.t_ns - due
    assert np.ptp(receipt) > 12e6  # the jitter is in the receipt stamps
