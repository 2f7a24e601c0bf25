"""Command line: ``python -m fieldtest.natnet serve | record | probe``.

serve   the NatNet emulator (twin OptiTrack); pose from the UDP pose feed (twin robot), a fixed
        pose, or the default square plan's ideal path
record  the mocap recorder into a rosbag2 bag, against the emulator or a real Motive
probe   connect to a server for a few seconds and print what it streams (lab check)

Both long-running commands stop cleanly on SIGINT / SIGTERM (the recorder always closes its bag).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import threading
import time
from pathlib import Path

from fieldtest.natnet import protocol as nn
from fieldtest.natnet.feed import DEFAULT_FEED_PORT, Pose, PoseFeedReceiver
from fieldtest.natnet.recorder import MocapRecorder, MocapRecorderError, RecorderConfig
from fieldtest.natnet.server import EmulatorConfig, NatNetEmulator, PoseSource
from fieldtest.procs import stop_on_signals
from fieldtest.realtime import settle_heap, try_realtime


def _window(text: str) -> tuple[float, float]:
    try:
        start, end = (float(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"window {text!r}: expected START:END in seconds") from None
    if end < start:
        raise argparse.ArgumentTypeError(f"window {text!r}: end before start")
    return start, end


def _version(text: str) -> nn.Version:
    try:
        return nn.parse_version(text)
    except nn.NatNetProtocolError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_connection_args(p: argparse.ArgumentParser, server: bool) -> None:
    p.add_argument("--mode", choices=("multicast", "unicast"), default="multicast")
    p.add_argument("--multicast-address", default=nn.DEFAULT_MULTICAST_ADDRESS)
    p.add_argument("--command-port", type=int, default=nn.DEFAULT_COMMAND_PORT)
    p.add_argument("--data-port", type=int, default=nn.DEFAULT_DATA_PORT)
    p.add_argument("--rigid-body-id", type=int, default=1, help="streaming id of the robot's rigid body")
    p.add_argument("--up-axis", choices=("y", "z"), default="y", help="Motive's streaming Up Axis setting")
    p.add_argument(
        "--natnet-version",
        type=_version,
        default=nn.NATNET_4_1 if server else None,
        help="bitstream version (server: what to stream, default 4.1; recorder: override SERVERINFO)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fieldtest.natnet", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the NatNet (OptiTrack Motive) emulator")
    _add_connection_args(serve, server=True)
    serve.add_argument("--bind", default="0.0.0.0", help="command socket address (and multicast interface)")
    serve.add_argument("--rate", type=float, default=120.0, help="frames per second")
    serve.add_argument("--rigid-body-name", default="turtlebot4")
    serve.add_argument("--noise-mm", type=float, default=0.2, help="std of position noise per axis")
    serve.add_argument("--angle-noise-deg", type=float, default=0.0, help="std of orientation noise")
    serve.add_argument("--seed", type=int, default=0)
    serve.add_argument("--invalid-prob", type=float, default=0.0, help="probability of an untracked frame")
    serve.add_argument("--invalid-window", type=_window, action="append", default=[], metavar="START:END")
    serve.add_argument("--loss-prob", type=float, default=0.0, help="probability of a frame not sent")
    serve.add_argument("--loss-window", type=_window, action="append", default=[], metavar="START:END")
    serve.add_argument("--latency-ms", type=float, default=0.0, help="mid-exposure to transmit")
    serve.add_argument("--source", choices=("feed", "static", "plan"), default="feed")
    serve.add_argument("--feed-bind", default="127.0.0.1")
    serve.add_argument("--feed-port", type=int, default=DEFAULT_FEED_PORT)
    serve.add_argument("--static-pose", default="0,0,0,0", help="x,y,z,yaw_deg for --source static")
    serve.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    serve.add_argument(
        "--realtime", action="store_true", help="ask for SCHED_FIFO (the twin: keeps frame timing under load)"
    )

    record = sub.add_parser("record", help="record mocap frames into a rosbag2 bag")
    record.add_argument("bag_dir", help="bag folder to create, e.g. <trial>/mocap")
    _add_connection_args(record, server=False)
    record.add_argument("--server", default="127.0.0.1", help="Motive / emulator address")
    record.add_argument("--local", default="0.0.0.0", help="local interface address (multicast join)")
    record.add_argument("--connect-timeout", type=float, default=10.0)
    record.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    record.add_argument(
        "--status",
        type=Path,
        default=None,
        help="JSON file of how far the recording got, rewritten 5 times a second",
    )

    probe = sub.add_parser("probe", help="connect for a few seconds and print what the server streams")
    _add_connection_args(probe, server=False)
    probe.add_argument("--server", default="127.0.0.1")
    probe.add_argument(
        "--local", default="0.0.0.0", help="this machine's address on the mocap network (multicast join)"
    )
    probe.add_argument("--seconds", type=float, default=2.0)
    return parser


def _pose_source(args: argparse.Namespace) -> PoseFeedReceiver | PoseSource:
    if args.source == "feed":
        # a frame sent latency after its exposure shows the pose at its exposure: keep that much past
        return PoseFeedReceiver(args.feed_bind, args.feed_port, history_s=args.latency_ms / 1000.0 + 0.5)
    if args.source == "static":
        try:
            x, y, z, yaw_deg = (float(v) for v in args.static_pose.split(","))
        except ValueError:
            raise ValueError(f"--static-pose {args.static_pose!r}: expected x,y,z,yaw_deg") from None
        half = math.radians(yaw_deg) / 2
        pose = (x, y, z, 0.0, 0.0, math.sin(half), math.cos(half))
        return lambda t: pose
    from fieldtest.plan import SquarePlan

    plan, start = SquarePlan(), time.time()

    def on_plan(t: float) -> Pose:
        x, y, yaw = plan.ideal_pose(t - start)[0]
        return (float(x), float(y), 0.0, 0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))

    return on_plan


def serve_main(args: argparse.Namespace) -> int:
    realtime = args.realtime and try_realtime()
    config = EmulatorConfig(
        rate_hz=args.rate,
        natnet_version=args.natnet_version,
        rigid_body_id=args.rigid_body_id,
        rigid_body_name=args.rigid_body_name,
        up_axis=args.up_axis,
        noise_m=args.noise_mm / 1000.0,
        angle_noise_rad=math.radians(args.angle_noise_deg),
        seed=args.seed,
        invalid_probability=args.invalid_prob,
        invalid_windows=args.invalid_window,
        loss_probability=args.loss_prob,
        loss_windows=args.loss_window,
        latency_s=args.latency_ms / 1000.0,
        multicast=args.mode == "multicast",
        multicast_address=args.multicast_address,
        bind_address=args.bind,
        command_port=args.command_port,
        data_port=args.data_port,
    ).check()
    source = _pose_source(args)
    try:
        emulator = NatNetEmulator(source, config)
    except OSError:
        if isinstance(source, PoseFeedReceiver):
            source.close()
        raise
    where = f"multicast {config.multicast_address}:{config.data_port}" if config.multicast else "unicast"
    feed = f", pose feed on {args.feed_bind}:{source.port}" if isinstance(source, PoseFeedReceiver) else ""
    settle_heap()
    with stop_on_signals() as stop:
        print(
            f"NatNet emulator: NatNet {nn.version_text(config.natnet_version)}, {config.rate_hz:g} Hz, "
            f"command {config.bind_address}:{emulator.command_port}, {where}, "
            f"up axis {config.up_axis}{feed}{', SCHED_FIFO' if realtime else ''}",
            flush=True,
        )
        timer = threading.Timer(args.duration, stop.set) if args.duration is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            emulator.serve_forever(stop)
        finally:
            if timer is not None:
                timer.cancel()
            if isinstance(source, PoseFeedReceiver):
                source.close()
    print(
        f"NatNet emulator: {emulator.frames_generated} frames generated, {emulator.frames_sent} sent, "
        f"{emulator.frames_skipped_late} skipped late, {len(emulator.errors)} errors",
        flush=True,
    )
    for error in emulator.errors[-5:]:
        print(f"  {error}", file=sys.stderr)
    return 0


def _recorder_config(args: argparse.Namespace) -> RecorderConfig:
    return RecorderConfig(
        server_address=args.server,
        local_address=args.local,
        multicast=args.mode == "multicast",
        multicast_address=args.multicast_address,
        command_port=args.command_port,
        data_port=args.data_port,
        rigid_body_id=args.rigid_body_id,
        up_axis=args.up_axis,
        natnet_version=args.natnet_version,
        connect_timeout_s=getattr(args, "connect_timeout", 5.0),
    )


def record_main(args: argparse.Namespace) -> int:
    recorder = MocapRecorder(args.bag_dir, _recorder_config(args), status_path=args.status)
    settle_heap()
    with stop_on_signals() as stop:
        print(f"mocap recorder: {args.server} ({args.mode}) -> {args.bag_dir}", flush=True)
        try:
            stats = recorder.run(stop, duration_s=args.duration)
        except MocapRecorderError as exc:
            print(f"mocap recorder: error: {exc}", file=sys.stderr)
            return 1
    info = recorder.server_info
    if info is not None:
        print(
            f"mocap recorder: server {info.app_name} {nn.version_text(info.app_version)}, "
            f"NatNet {nn.version_text(info.natnet_version)}"
        )
    print(f"mocap recorder: {stats.summary()}", flush=True)
    for error in stats.errors[:5]:
        print(f"  {error}", file=sys.stderr)
    return 0


def probe_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="natnet-probe-") as tmp:
        recorder = MocapRecorder(f"{tmp}/bag", _recorder_config(args))
        try:
            stats = recorder.run(duration_s=args.seconds)
        except MocapRecorderError as exc:
            print(f"probe: error: {exc}", file=sys.stderr)
            return 1
    info = recorder.server_info
    if info is not None:
        print(
            f"server: {info.app_name} {nn.version_text(info.app_version)}, NatNet "
            f"{nn.version_text(info.natnet_version)}, data port {info.data_port}, "
            f"{'multicast ' + str(info.multicast_address) if info.multicast else 'unicast'}"
        )
    if recorder.models is not None:
        for rb in recorder.models.rigid_bodies:
            print(f"rigid body: id {rb.id} {rb.name!r}, {len(rb.marker_offsets)} markers")
    rate = stats.frames / args.seconds if args.seconds > 0 else 0.0
    print(f"frames: {stats.summary()}; about {rate:.0f} frames/s")
    if stats.frames and stats.valid == 0:
        print(f"warning: rigid body id {args.rigid_body_id} never tracked", file=sys.stderr)
    return 0 if stats.frames else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"serve": serve_main, "record": record_main, "probe": probe_main}[args.command](args)
    except (ValueError, OSError) as exc:
        print(f"fieldtest.natnet {args.command}: error: {exc}", file=sys.stderr)
        return 2
