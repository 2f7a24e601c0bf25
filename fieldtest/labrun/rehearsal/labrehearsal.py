"""Lab rehearsal: a whole lab trial on one machine, with the real rclpy nodes and a simulated robot.

    fieldtest lab rehearse trials/rehearsal.yaml [--base-vendor fastdds|cyclonedds] [--no-base] ...

Everything the lab runner does on a lab day runs for real: ``fieldtest.labrun.orchestration.labrunner.LabRunner``
(pre-flight, countdown, go, stop path, analysis), the rclpy nodes of host_ws/ and robot_ws/ started
from the launch plan's command lines (``fieldtest.labrun.orchestration.planrun``; ``ros2 launch`` cannot be
installed from the ROS 2 wheels), the robot's Create 3 pre-flight, the kit's NatNet recorder. Only
the hardware is simulated: the TurtleBot 4 base (``fieldtest.labrun.rehearsal.simbase``, the twin's Create 3
model as a ROS 2 participant) and Motive (the NatNet emulator, fed the base's true pose).

The nodes need a ROS 2 environment: ``tools/install_ros.sh`` builds one from the ROS 2 wheels
(.venv-ros: rclpy with Fast DDS, fieldtest_msgs). Both sides run on this machine; the robot side
records under ``<runs>/robot-side`` as the Pi would and is collected like a remote one.

Bridged middlewares: each side's DDS gets a domain of its own (``side_domain``: the robot's is the
host's + 100), so on one machine the host's commands reach the robot only through the two bridges,
as over the lab's Wi-Fi. The bridges, router and broker are the launch plan's side processes with
the files the plan writes, started and stopped with each trial by planrun (``--rehearsal``): the
Zenoh bridge as zenohd + the ros2dds plugin, Mosquitto for real, and in place of mqtt_client (not
installable here) the kit's stand-in ``fieldtest.labrun.rehearsal.mqtt_standin``. For ``mqtt-broker`` the
broker of the "third machine" runs here with the kit's broker config. Zenoh and MQTT ports are
picked free per trial (several rehearsals may share the machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldtest.labrun.orchestration.labrunner import (
    ANALYZED_END_REASONS,
    LabOptions,
    LabRunner,
    LabTrialResult,
)
from fieldtest.labrun.orchestration.planrun import RehearsalError
from fieldtest.labrun.orchestration.remote import local_robot_side
from fieldtest.lifecycle import analyze
from fieldtest.middleware import registry
from fieldtest.middleware.zenoh.bridge import side_domain
from fieldtest.procs import ProcessGroup, free_port, interruption, run_stop_event
from fieldtest.record import TrialRequest

ROS_VENV = Path(__file__).resolve().parents[3] / ".venv-ros"
PLANRUN = ("-m", "fieldtest.labrun.orchestration.planrun", "--rehearsal")
NATNET_READY = "NatNet emulator:"
BASE_READY = "READY simulated base"
BASE_RECORD = "base_commands.csv"  # what the simulated base took; copied into the trial
# rclpy from the ROS 2 wheels links Fast DDS only; rosbag2 is not among the wheels.
NODE_ARGS = {"dds": "fastrtps", "record_ros2bag": "false"}


def ros_python(venv: Path = ROS_VENV) -> str:
    """The ROS 2 environment's interpreter, or a RehearsalError saying how to build it."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise RehearsalError(f"no ROS 2 environment at {venv}: run tools/install_ros.sh (make install does)")
    return str(python)


@dataclass
class SimulatedLab:
    """The hardware a rehearsal simulates: which base, on which DDS vendor, set up how."""

    base: bool = True  # False: no base at all (the pre-flight must refuse)
    base_vendor: str = "fastdds"  # fastdds (rclpy, like the Create 3's default firmware) or cyclonedds
    safety_override: str = "full"
    mocap_rate_hz: float = 120.0
    mocap_latency_s: float = 0.0  # Motive's frames leave this long after their exposure
    extra_base_args: list[str] = field(default_factory=list)
    # robot side processes left out (e.g. "zenoh_bridge", "mqtt_client"): a link that never comes up
    robot_without: tuple[str, ...] = ()


@contextlib.contextmanager
def simulated_hardware(
    request: TrialRequest,
    distro: str,
    lab: SimulatedLab,
    log_dir: Path,
    python: str,
    host_args: Mapping[str, str] | None = None,
) -> Iterator[dict[str, int]]:
    """The NatNet emulator and the simulated base for one trial (``host_args``: the host side's
    extra launch arguments, which the trial's own machine is set up with); yields the NatNet ports."""
    procs = ProcessGroup(log_dir)
    ports = {"command": free_port(2), "data": free_port(2), "feed": free_port(2)}
    try:
        procs.start(
            "natnet",
            [
                sys.executable,
                "-m",
                "fieldtest.natnet",
                "serve",
                "--mode",
                "unicast",
                "--command-port",
                str(ports["command"]),
                "--data-port",
                str(ports["data"]),
                "--bind",
                "127.0.0.1",
                "--rate",
                f"{lab.mocap_rate_hz:g}",
                "--latency-ms",
                f"{lab.mocap_latency_s * 1000:g}",
                "--rigid-body-id",
                str(request.rigid_body_id),
                "--up-axis",
                "y",
                "--source",
                "feed",
                "--feed-port",
                str(ports["feed"]),
                "--realtime",  # Motive runs on its own PC: here it must not wait behind the nodes
            ],  # fmt: skip
        )
        procs.wait_ready("natnet", marker=NATNET_READY)
        _start_middleware_machine(procs, request, distro, log_dir, host_args or {})
        if lab.base:
            base_python = python if lab.base_vendor == "fastdds" else sys.executable
            procs.start(
                "base",
                [
                    base_python,
                    "-m",
                    "fieldtest.labrun.rehearsal.simbase",
                    "--namespace",
                    request.transport.namespace,
                    "--distro",
                    distro,
                    "--vendor",
                    lab.base_vendor,
                    "--safety-override",
                    lab.safety_override,
                    "--domain-id",
                    str(robot_domain(request)),
                    "--feed-port",
                    str(ports["feed"]),
                    "--status",
                    str(log_dir / "base_status.json"),
                    "--record",
                    str(log_dir / BASE_RECORD),
                    *lab.extra_base_args,
                ],  # fmt: skip
            )
            procs.wait_ready("base", marker=BASE_READY, timeout_s=30.0)
        yield ports
    finally:
        procs.stop_all(["base", "natnet", "broker"])


def robot_domain(request: TrialRequest) -> int:
    """The robot side's DDS domain: its own when bridged (only the bridges join the two sides)."""
    bridged = lab_bridge(request) is not None
    return side_domain(request.transport, "robot") if bridged else request.transport.domain_id


def lab_bridge(request: TrialRequest) -> str | None:
    """The program that bridges this trial's middleware in the lab (the registry's), or None."""
    return registry.get(request.transport.middleware).lab_bridge


def _start_middleware_machine(
    procs: ProcessGroup, request: TrialRequest, distro: str, log_dir: Path, host_args: Mapping[str, str]
) -> None:
    """The machine of its own the lab runs for the trial's middleware, if any (mqtt-broker's
    broker), as the middleware's ``rehearsal_machine_process`` says."""
    from fieldtest.labrun.configuration.launchsettings import launch_args_for_trial, parse_launch_args

    args = launch_args_for_trial(request, "host", ros_distro=distro, trial_dir=log_dir, extra=dict(host_args))
    cfg = parse_launch_args(args, "host", environ={})
    machine = registry.get(cfg.middleware).rehearsal_machine_process(cfg, log_dir)
    if machine is None:
        return
    proc, ready = machine
    procs.start(proc.name, proc.argv)
    procs.wait_ready(proc.name, marker=ready, timeout_s=10.0)


def rehearsal_request(request: TrialRequest) -> TrialRequest:
    """``request`` with free Zenoh and MQTT ports: everything listens on this one machine."""
    return request.model_copy(update={"transport": request.transport.with_ports(free_port)})


def side_options(options: LabOptions, request: TrialRequest) -> LabOptions:
    """The robot side in its own DDS domain for a bridged trial (``robot_domain``)."""
    if lab_bridge(request) is None:
        return options
    robot_args = {**options.robot_args, "domain_id": str(robot_domain(request))}
    return dataclasses.replace(options, robot_args=robot_args)


def with_clock_port(options: LabOptions) -> LabOptions:
    """A free port for the UDP clock probes (``clock_source: udp``), the same on both sides."""
    port = {"clock_port": str(free_port())}
    return dataclasses.replace(
        options, host_args={**options.host_args, **port}, robot_args={**options.robot_args, **port}
    )


def rehearsal_options(options: LabOptions, python: str, lab: SimulatedLab | None = None) -> LabOptions:
    """``options`` (the campaign's lab settings, args) with both sides on this machine via planrun."""
    robot_without = tuple(f"--without={name}" for name in (lab.robot_without if lab else ()))
    return dataclasses.replace(
        options,
        host_launch=(python, *PLANRUN, "host"),
        host_args={**NODE_ARGS, **options.host_args},
        robot_args={**NODE_ARGS, **options.robot_args},
        robot=local_robot_side(
            options.runs_dir / "robot-side",
            (python, *PLANRUN, *robot_without, "robot"),
            estop=(python, "-m", "fieldtest.labrun.nodelogic.estop"),
        ),
    )


def emulator_recorder(ports: dict[str, int]) -> Any:
    """The kit's NatNet recorder reading this trial's emulator, unicast on loopback."""
    from fieldtest.natnet.recorder import RecorderConfig

    return RecorderConfig(
        server_address="127.0.0.1",
        local_address="127.0.0.1",
        multicast=False,
        command_port=ports["command"],
        data_port=ports["data"],
        up_axis="y",
    )


def rehearse(
    requests: list[TrialRequest],
    options: LabOptions,
    lab: SimulatedLab,
    venv: Path = ROS_VENV,
    stop: threading.Event | None = None,
) -> list[LabTrialResult]:
    """Each trial with fresh simulated hardware (the robot back at the start, as in the lab). A
    stop signal during a trial (``LabRunner.stop``, shared as ``stop``) ends the rehearsal."""
    stop = threading.Event() if stop is None else stop
    from fieldtest.labrun.orchestration.labrunner import check_side_args

    check_side_args(options.host_args, options.robot_args)
    python = ros_python(venv)
    nodes_distro = _check_ros_environment(python)
    _check_distro(options.ros_distro, nodes_distro, python)
    _check_middlewares(requests, options.ros_distro, nodes_distro, python)
    local = rehearsal_options(options, python, lab)
    results = []
    with run_stop_event(stop):  # between trials too: the simulated hardware is stopped in order
        for i, request in enumerate(requests):
            if stop.is_set():  # a stop signal ended the previous trial: the campaign ends with it
                options.say(f"not run ({interruption(stop)}): {', '.join(r.name for r in requests[i:])}")
                break
            options.say(f"rehearsal {i + 1}/{len(requests)}: {request.name}")
            note = registry.get(request.transport.middleware).rehearsal_note
            if note:
                options.say(f"  {note}")
            request = rehearsal_request(request)
            log_dir = options.runs_dir / "simulated-hardware" / f"{i + 1:02d}-{request.name}"
            with simulated_hardware(
                request, options.ros_distro, lab, log_dir, python, options.host_args
            ) as ports:
                trial_options = with_clock_port(side_options(local, request))
                # analyzed below, once the base's record is complete (the base stops on leaving)
                trial_options = dataclasses.replace(
                    trial_options, mocap=emulator_recorder(ports), analyze=False
                )
                result = LabRunner(trial_options, stop).run_trial(request)
            if _add_base_record(result.trial_dir, log_dir / BASE_RECORD):
                options.say(f"  base record: {result.trial_dir / 'base'}")
            if options.analyze and result.end_reason in ANALYZED_END_REASONS:
                analyze(result.trial_dir, lambda line: options.say(f"  {line}"), plots=options.plots)
            options.say(f"  {result.end_reason}: {result.trial_dir} {result.detail}")
            results.append(result)
    return results


def _add_base_record(trial_dir: Path, record: Path) -> bool:
    """The simulated base's record copied into the trial (False: none). Imported here, not at
    import: the analysis pipeline loads the twin's base model, which no lab module may load
    (tests/test_endpoints_layers.py)."""
    from fieldtest.analysis import add_base_record

    return add_base_record(trial_dir, record)


@functools.cache  # once per interpreter and process: a test session rehearses many campaigns
def _check_ros_environment(python: str) -> str:
    """The ROS 2 environment imports what the nodes need; returns its rclpy's distro ('' if unknown)."""
    imports = "import rclpy, fieldtest_msgs.msg, fieldtest_host, fieldtest_robot"
    distro = (
        "from fieldtest.labrun.configuration.launchsettings import installed_rclpy_distro as d; print(d())"
    )
    done = subprocess.run(
        [python, "-c", f"{imports}; {distro}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise RehearsalError(
            f"the ROS 2 environment {python} is incomplete ({last}): run tools/install_ros.sh"
        )
    return done.stdout.strip()


def _check_distro(distro: str, nodes_distro: str, python: str) -> None:
    """A rehearsal runs the distro of its rclpy, no other: Humble's rclpy differs where the kit
    meets it (it calls subscription callbacks with the message only; its Zenoh bridge sizes
    ros_discovery_info's GIDs at 24 bytes, not 16), so a trial for another distro would claim a
    run it never had."""
    nodes = nodes_distro or "unknown"
    if nodes != distro:
        raise RehearsalError(
            f"ros_distro {distro}: the rehearsal's nodes run {nodes}'s rclpy ({python}) and cannot "
            f"rehearse {distro}; rehearse with --ros-distro {nodes}"
        )


def _check_middlewares(requests: list[TrialRequest], distro: str, nodes_distro: str, python: str) -> None:
    """What each trial's middleware needs on this machine (its programs; the Zenoh bridge the
    nodes' distro), before any trial starts: one line, what and how."""
    for request in requests:
        problem = registry.get(request.transport.middleware).rehearsal_problem(distro, nodes_distro, python)
        if problem:
            raise RehearsalError(f"{request.name}: {problem}")
