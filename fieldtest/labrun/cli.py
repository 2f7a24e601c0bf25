"""``fieldtest lab``: run campaigns with a real TurtleBot 4, and inspect what the launch files do.

fieldtest lab list trials/seed-study.yaml                 the campaign's trials, in run order
fieldtest lab run trials/seed-study.yaml --robot ubuntu@tb4 --natnet-server 192.168.1.5
fieldtest lab rehearse trials/rehearsal.yaml                  a lab trial on this machine: real rclpy nodes, simulated robot
fieldtest lab launch-plan host middleware:=zenoh-peer robot_address:=192.168.1.20 [--out DIR]
fieldtest lab broker-config keystore:=K namespace:=/tb4 ros_distro:=jazzy --out DIR   a broker for plain and TLS
fieldtest lab create3-params [--namespace /tb4]           the Create 3 parameter file
fieldtest lab check-create3 dump.yaml [--plan plan.yaml]  judge `ros2 param dump /motion_control`
fieldtest lab measure-stop BAG [--namespace /tb4]         the base's stop-on-silence time, measured
fieldtest lab bundle --out DIR [--platform aarch64] [--python 3.12]   the robot's offline install
fieldtest lab perf trials/seed-study.yaml --robot ubuntu@tb4 [fieldtest perf options]   perf rows host -> robot
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldtest.errors import FieldtestError
from fieldtest.labrun.configuration.launchsettings import LaunchArgError, load_plan, with_lab_defaults
from fieldtest.labrun.nodelogic.create3params import (
    check_create3,
    create3_param_file,
    parse_param_dump,
    verdict,
)
from fieldtest.labrun.orchestration.bundle import PLATFORMS
from fieldtest.middleware.mqtt.settings import MQTT_PORT
from fieldtest.middleware.mqtt.settings import Settings as MqttSettings
from fieldtest.trialcampaign import load_trials

if TYPE_CHECKING:
    from fieldtest.record import TrialRequest


def _kv(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise LaunchArgError(f"{flag} {item!r}: expected name=value")
        out[name] = value
    return out


def _side_args(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """--host-arg / --robot-arg, plus dry_run on both sides for --dry-run."""
    host, robot = _kv(args.host_arg, "--host-arg"), _kv(args.robot_arg, "--robot-arg")
    if args.dry_run:
        host["dry_run"] = robot["dry_run"] = "true"
    return host, robot


def list_main(args: argparse.Namespace) -> int:
    campaign, trials = load_trials(args.campaign, ros_distro=args.ros_distro)
    print(f"{campaign.campaign}: {len(trials)} trials, order {campaign.order}")
    for i, t in enumerate(trials):
        tr = t.transport
        print(
            f"{i + 1:3d}  {t.name:<48} {tr.middleware:<18} security={tr.security:<10} qos={tr.qos} "
            f"cmd_type={t.cmd_type}"
        )
    return 0


def _select(trials: list, only: str | None, first: int | None) -> list:
    if only:
        trials = [t for t in trials if only in t.name]
    return trials[:first] if first else trials


def _selected_trials(args: argparse.Namespace) -> tuple:
    """The campaign and the trials --only/--first select, for --ros-distro (else the campaign's
    lab.ros_distro), with both sides' launch arguments checked; says so when none is left."""
    from fieldtest.labrun.orchestration.preflight import refuse_before_start

    campaign, trials = load_trials(args.campaign, ros_distro=args.ros_distro)
    trials = [with_lab_defaults(t) for t in _select(trials, args.only, args.first)]
    if not trials:
        print(f"fieldtest lab {args.command}: no trial selected", file=sys.stderr)
    distro = args.ros_distro or campaign.lab.ros_distro
    try:
        refuse_before_start(
            trials, distro, _kv(args.host_arg, "--host-arg"), _kv(args.robot_arg, "--robot-arg")
        )
    except LaunchArgError as exc:
        raise LaunchArgError(f"{args.campaign}: {exc}") from None
    return campaign, trials


def run_main(args: argparse.Namespace) -> int:
    from fieldtest.labrun.nodelogic.estop import ros2_zero_commands, zero_commands_over_transport
    from fieldtest.labrun.orchestration.labrunner import HOST_LAUNCH, LabOptions, LabRunner
    from fieldtest.labrun.orchestration.remote import RemoteShell, RobotSide, robot_setup_script

    campaign, trials = _selected_trials(args)
    if not trials:
        return 2
    host_args, robot_args = _side_args(args)
    distro = args.ros_distro or campaign.lab.ros_distro
    host_launch: tuple[str, ...]
    robot_launch: tuple[str, ...]
    robot_estop: tuple[str, ...]
    estop: Callable[[TrialRequest], object]
    if args.standin:  # the stand-in robot drives no base: the emergency stop goes over the link
        standin = (sys.executable, "-m", "fieldtest.labrun.rehearsal.standin")
        host_launch, robot_launch, setup = (*standin, "host"), (*standin, "robot"), ""
        estop, robot_estop = (lambda request: zero_commands_over_transport(request)), ()
    else:  # the robot's own e-stop first (RobotSide.estop), then ros2 topic pub from the host
        host_launch, robot_launch, setup = HOST_LAUNCH, RobotSide().launch, robot_setup_script(distro)
        estop, robot_estop = (
            (lambda request: ros2_zero_commands(request, distro, host_args)),
            RobotSide().estop,
        )
    robot = RobotSide(
        shell=RemoteShell(args.robot),
        setup=args.robot_setup or setup,
        remote_root=args.remote_root,
        launch=robot_launch,
        estop=robot_estop,
    )
    if not args.standin:  # before anything moves: the trials against the robot's setup and programs
        from fieldtest.labrun.orchestration.robotsetup import read_robot, refuse_unmet_robot, robot_probes

        found, held = read_robot(robot, robot_probes(trials, distro, robot_args))
        print("robot setup: " + ", ".join(f"{k}={v or '(empty)'}" for k, v in found.items()))
        for note in refuse_unmet_robot(trials, distro, robot_args, found, held):
            print("robot setup: " + note)
    mocap = None
    if args.natnet_server:
        from fieldtest.natnet.recorder import RecorderConfig

        mocap = RecorderConfig(
            server_address=args.natnet_server,
            local_address=args.natnet_local,
            multicast=args.natnet_mode == "multicast",
            up_axis=args.up_axis,
        )
    confirm = None if args.yes else (lambda question: input(question).strip().lower() in ("y", "yes"))
    options = LabOptions(
        runs_dir=Path(args.runs_dir) / campaign.campaign,
        ros_distro=distro,
        lab=campaign.lab,
        robot=robot,
        host_launch=host_launch,
        host_args=host_args,
        robot_args=robot_args,
        mocap=mocap,
        confirm=confirm if campaign.lab.confirm_each_trial else None,
        analyze=not args.no_analyze,
        plots=not args.no_plots,
        emergency_stop=estop,
    )
    runner = LabRunner(options)
    results = runner.run_all(trials)
    return _campaign_exit(results, runner.stop, f"trials completed; results under {options.runs_dir}")


def _campaign_exit(results: list, stop: threading.Event, what: str) -> int:
    """0 if every trial completed, 130 (as for SIGINT) after a stop signal, else 1."""
    from fieldtest.lifecycle import exit_code

    done = sum(r.end_reason == "completed" for r in results)
    print(f"{done}/{len(results)} {what}")
    return exit_code(results, stop)


def rehearse_main(args: argparse.Namespace) -> int:
    from fieldtest.labrun.orchestration.labrunner import LabOptions
    from fieldtest.labrun.orchestration.remote import RobotSide
    from fieldtest.labrun.rehearsal.labrehearsal import SimulatedLab, rehearse

    campaign, trials = _selected_trials(args)
    if not trials:
        return 2
    host_args, robot_args = _side_args(args)
    options = LabOptions(
        runs_dir=Path(args.runs_dir) / campaign.campaign,
        ros_distro=args.ros_distro or campaign.lab.ros_distro,
        lab=campaign.lab,
        robot=RobotSide(),
        host_args=host_args,
        robot_args=robot_args,
        analyze=not args.no_analyze,
    )
    lab = SimulatedLab(
        base=not args.no_base,
        base_vendor=args.base_vendor,
        safety_override=args.safety_override,
        robot_without=tuple(args.robot_without),
    )
    stop = threading.Event()
    results = rehearse(trials, options, lab, stop=stop)  # a RehearsalError: one line from fieldtest.cli
    return _campaign_exit(results, stop, f"rehearsal trials completed; results under {options.runs_dir}")


def _launch_values(arguments: list[str]) -> dict[str, str]:
    values = {}
    for item in arguments:
        name, sep, value = item.partition(":=")
        if not sep:
            raise LaunchArgError(f"argument {item!r}: expected name:=value")
        values[name] = value
    return values


def launch_plan_main(args: argparse.Namespace) -> int:
    from fieldtest.labrun.orchestration.launchplan import launch_plan

    values = _launch_values(args.arguments)
    if args.out:
        values.setdefault("trial_dir", str(Path(args.out)))
    plan = launch_plan(values, args.role)
    print("\n".join(plan.summary()))
    if args.out:
        for path in plan.write_files():
            print(f"wrote {path}")
    return 0


def broker_config_main(args: argparse.Namespace) -> int:
    """The separate broker machine's Mosquitto for a campaign with security off and on."""
    from fieldtest.labrun.configuration.launchsettings import parse_launch_args
    from fieldtest.middleware.mqtt.lab import broker_user, mosquitto_acl, two_listener_mosquitto_conf

    values = {"middleware": "mqtt-broker", "security": "mtls-acl", **_launch_values(args.arguments)}
    cfg = parse_launch_args(values, "host")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    acl, conf = out / "mosquitto.acl", out / "mosquitto.conf"
    acl.write_text(mosquitto_acl(cfg))
    conf.write_text(two_listener_mosquitto_conf(cfg, acl, plain_port=args.plain_port, run_as=broker_user()))
    print(f"wrote {conf} (plain on {args.plain_port}, TLS on {cfg.settings(MqttSettings).port}) and {acl}")
    print(f"run: mosquitto -c {conf}")
    return 0


def create3_params_main(args: argparse.Namespace) -> int:
    sys.stdout.write(create3_param_file(args.namespace))
    return 0


def check_create3_main(args: argparse.Namespace) -> int:
    params = parse_param_dump(Path(args.dump).read_text(), args.dump)
    plan, _ = load_plan(args.plan or "")
    go, findings = verdict(check_create3(params, plan))
    for f in findings:
        print(f"[{f.severity.upper():4}] {f.check}: {f.detail}")
    return 0 if go else 1


def measure_stop_main(args: argparse.Namespace) -> int:
    """Read a ``ros2 bag record`` of cmd_vel and odom (one recorder, one clock: the receive times)."""
    from rosbags.highlevel import AnyReader

    from fieldtest.labrun.nodelogic.create3params import measure_stop_after_silence

    ns = "/" + args.namespace.strip("/") if args.namespace.strip("/") else ""
    cmd_topic, odom_topic = f"{ns}/{args.cmd_topic}", f"{ns}/{args.odom_topic}"
    commands, odom = [], []
    with AnyReader([Path(args.bag)]) as reader:
        wanted = [c for c in reader.connections if c.topic in (cmd_topic, odom_topic)]
        if {c.topic for c in wanted} != {cmd_topic, odom_topic}:
            raise ValueError(f"{args.bag}: needs both {cmd_topic} and {odom_topic}")
        for connection, t_ns, raw in reader.messages(connections=wanted):
            msg: Any = reader.deserialize(raw, connection.msgtype)  # Twist, TwistStamped or Odometry
            if connection.topic == cmd_topic:
                twist = getattr(msg, "twist", msg)  # TwistStamped (Jazzy) or Twist (Humble)
                commands.append((t_ns * 1e-9, twist.linear.x))
            else:
                odom.append((t_ns * 1e-9, msg.twist.twist.linear.x))
    print(measure_stop_after_silence(commands, odom).summary())
    return 0


def bundle_main(args: argparse.Namespace) -> int:
    """The Pi's offline install: the kit's wheel, its robot-side wheels for the target, robot_ws."""
    from fieldtest.labrun.orchestration.bundle import build_bundle, target_from_args

    target = target_from_args(args.platform or ["aarch64"], args.python, args.glibc)
    manifest = build_bundle(Path(args.out), target)
    files = len(json.loads(manifest.read_text())["files"])
    print(f"wrote {args.out} for {target.describe()}: {files} files, listed in {manifest}")
    print(f"on the robot: bash {Path(args.out).name}/install.sh (docs/lab-guide.md section 3.1)")
    return 0


DRY_RUN_HELP = "real nodes and command path, the base not driven (commands end at the link monitor)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fieldtest lab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list a campaign's trials in run order")
    p.add_argument("campaign")
    p.add_argument("--ros-distro", choices=("humble", "jazzy"), help="override the campaign's lab.ros_distro")
    p.set_defaults(func=list_main)

    p = sub.add_parser("run", help="run a campaign's trials with the real robot")
    p.add_argument("campaign")
    p.add_argument("--only", help="run only trials whose name contains this")
    p.add_argument("--first", type=int, help="run only the first N selected trials")
    p.add_argument(
        "--robot", help="ssh destination of the robot's Pi (user@host); omit to run the robot side locally"
    )
    p.add_argument("--remote-root", default="~/fieldtest/trials", help="where the robot records")
    p.add_argument("--robot-setup", default="", help="shell setup on the robot before ros2 launch")
    p.add_argument("--ros-distro", choices=("humble", "jazzy"), help="override the campaign's lab.ros_distro")
    p.add_argument("--natnet-server", help="Motive's address (omit: no mocap; the mocap check then fails)")
    p.add_argument("--natnet-local", default="0.0.0.0", help="this machine's address on the mocap network")
    p.add_argument("--natnet-mode", choices=("multicast", "unicast"), default="multicast")
    p.add_argument("--up-axis", choices=("y", "z"), default="y", help="Motive's streaming Up Axis")
    p.add_argument(
        "--host-arg", action="append", default=[], metavar="NAME=VALUE", help="extra host launch argument"
    )
    p.add_argument(
        "--robot-arg", action="append", default=[], metavar="NAME=VALUE", help="extra robot launch argument"
    )
    p.add_argument("--runs-dir", default="trials/runs")
    p.add_argument("--yes", action="store_true", help="do not ask before each trial")
    p.add_argument(
        "--no-analyze", action="store_true", help="record only (fieldtest analyze can analyze later)"
    )
    # the earlier spelling, still accepted so existing scripts run
    p.add_argument("--no-analyse", dest="no_analyze", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--no-plots", action="store_true", help="analyze without the PNG plots (fieldtest analyze draws them)"
    )
    p.add_argument(
        "--standin", action="store_true", help="ROS-free stand-ins instead of ros2 launch (link check)"
    )
    p.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    p.set_defaults(func=run_main)

    p = sub.add_parser(
        "rehearse", help="a lab trial on this machine: real rclpy nodes, simulated base and Motive"
    )
    p.add_argument("campaign")
    p.add_argument("--only", help="run only trials whose name contains this")
    p.add_argument("--first", type=int, help="run only the first N selected trials")
    p.add_argument("--ros-distro", choices=("humble", "jazzy"), help="override the campaign's lab.ros_distro")
    p.add_argument("--base-vendor", choices=("fastdds", "cyclonedds"), default="fastdds")
    p.add_argument("--safety-override", choices=("none", "backup_only", "full"), default="full")
    p.add_argument("--no-base", action="store_true", help="no simulated base (the pre-flight must refuse)")
    p.add_argument(
        "--robot-without",
        action="append",
        default=[],
        metavar="NAME",
        help="leave a robot side process out, e.g. zenoh_bridge or mqtt_client (a link that never comes up)",
    )
    p.add_argument("--host-arg", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--robot-arg", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--runs-dir", default="trials/runs")
    p.add_argument(
        "--no-analyze", action="store_true", help="record only (fieldtest analyze can analyze later)"
    )
    # the earlier spelling, still accepted so existing scripts run
    p.add_argument("--no-analyse", dest="no_analyze", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help=DRY_RUN_HELP)
    p.set_defaults(func=rehearse_main)

    p = sub.add_parser("launch-plan", help="show (and write) what a launch file would start")
    p.add_argument("role", choices=("host", "robot"))
    p.add_argument("arguments", nargs="*", metavar="NAME:=VALUE")
    p.add_argument("--out", help="write the generated configs under this trial directory")
    p.set_defaults(func=launch_plan_main)

    p = sub.add_parser(
        "broker-config",
        help="Mosquitto for a separate broker machine: a plain and a TLS listener (security off and on)",
    )
    p.add_argument("arguments", nargs="*", metavar="NAME:=VALUE", help="the host launch's arguments")
    p.add_argument("--plain-port", type=int, default=MQTT_PORT, help="the plain listener's port")
    p.add_argument("--out", required=True, help="folder for mosquitto.conf and mosquitto.acl")
    p.set_defaults(func=broker_config_main)

    p = sub.add_parser("create3-params", help="print the Create 3 parameter file")
    p.add_argument("--namespace", default="")
    p.set_defaults(func=create3_params_main)

    p = sub.add_parser(
        "check-create3", help="judge a `ros2 param dump <ns>/motion_control` file against a plan"
    )
    p.add_argument("dump")
    p.add_argument("--plan", help="plan YAML (default: the seed study's)")
    p.set_defaults(func=check_create3_main)

    p = sub.add_parser(
        "measure-stop",
        help="how long the base drives on after its commands stop (ros2 bag of cmd_vel + odom)",
    )
    p.add_argument("bag")
    p.add_argument("--namespace", default="")
    p.add_argument("--cmd-topic", default="cmd_vel")
    p.add_argument("--odom-topic", default="odom")
    p.set_defaults(func=measure_stop_main)

    sub.add_parser(  # parsed by fieldtest.perf.labperf (lab_main hands it over): listed here for --help
        "perf", add_help=False, help="perf rows between this machine and the robot (docs/perf.md, the lab)"
    )

    p = sub.add_parser("bundle", help="the robot's offline install: wheels for its platform and robot_ws")
    p.add_argument("--out", required=True, help="folder to write (copy it to the Pi as ~/fieldtest)")
    p.add_argument(
        "--platform",
        action="append",
        choices=PLATFORMS,
        help="the robot's CPU (repeat for several; default aarch64, the TurtleBot 4's Pi)",
    )
    p.add_argument("--python", default="3.12", help="the robot's CPython (3.12: Ubuntu 24.04, ROS 2 Jazzy)")
    p.add_argument("--glibc", default="2.39", help="the robot's glibc (2.39: Ubuntu 24.04)")
    p.set_defaults(func=bundle_main)
    return parser


def lab_main(argv: list[str]) -> int:
    if argv[:1] == ["perf"]:  # its options are fieldtest perf's, parsed there
        from fieldtest.perf.labperf import lab_perf_main

        return lab_perf_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except FieldtestError:
        raise  # one line from the command line (fieldtest.cli)
    except (OSError, ValueError) as exc:
        print(f"fieldtest lab {args.command}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
