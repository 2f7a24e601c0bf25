"""Configurations that would leave the robot standing still while the trial "completes" are
refused before anything starts, with one line naming the field and the fix:
a command type the base's cmd_vel does not take, secure DDS without the relay, a robot whose
CycloneDDS is pinned to the USB link to the base only. Swept over distros, middlewares, roles and
security; the shipped campaigns pass on both distros with the guide's run arguments."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fieldtest.cli import main as fieldtest_main
from fieldtest.labrun.configuration.launchsettings import LaunchArgError, parse_launch_args
from fieldtest.labrun.orchestration.preflight import refuse_before_start
from fieldtest.middleware import registry
from fieldtest.trialcampaign import load_trials

ROOT = Path(__file__).resolve().parents[1]
TRIALS = ROOT / "trials"
DISTROS = ("humble", "jazzy")
ROLES = ("host", "robot")
LAB_MIDDLEWARES = registry.names(lab=True)
DDS_MIDDLEWARES = tuple(m for m in LAB_MIDDLEWARES if registry.get(m).family == "dds")
# The run arguments docs/lab-guide.md section 7 gives every campaign in trials/.
GUIDE_HOST_ARGS = {"network_interface": "wlp2s0", "relay": "true"}
GUIDE_ROBOT_ARGS = {"base_interface": "usb0", "network_interface": "wlan0", "relay": "true"}


def _reaches_the_base(middleware: str) -> dict[str, str]:
    """What the other sweeps add so that only their own field decides: a middleware whose RMW is not
    DDS reaches no base at all and is accepted only as a dry run (its own test below)."""
    return {} if registry.get(middleware).lab_rmw_speaks_dds else {"dry_run": "true"}


def _refusal(args: dict[str, str], role: str) -> str:
    args = {**_reaches_the_base(args.get("middleware", "dds")), **args}
    try:
        parse_launch_args(args, role, environ={})
    except LaunchArgError as exc:
        return str(exc)
    return ""


def _one_line(text: str, *names: str) -> None:
    assert "\n" not in text
    for name in names:
        assert name in text, (name, text)


# --------------------------------------------------------------------------- command type (3)


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("middleware", LAB_MIDDLEWARES)
@pytest.mark.parametrize("role", ROLES)
def test_a_command_type_the_base_does_not_take_is_refused(distro, middleware, role):
    """Jazzy: create3_republisher takes TwistStamped on cmd_vel; Humble: the Create 3 takes Twist."""
    wanted = {"humble": "twist", "jazzy": "twist_stamped"}[distro]
    for cmd_type in ("twist", "twist_stamped", "auto"):
        for relay in ("false", "true"):
            args = {"ros_distro": distro, "middleware": middleware, "cmd_type": cmd_type, "relay": relay}
            refusal = _refusal(args, role)
            if cmd_type in (wanted, "auto"):
                assert refusal == "", (args, refusal)
                checked = {**_reaches_the_base(middleware), **args}
                assert parse_launch_args(checked, role, environ={}).cmd_type == wanted
            else:
                _one_line(refusal, "cmd_type", distro, f"takes {wanted} on cmd_vel", "cmd_type auto")


def test_jazzy_refusal_names_the_republisher():
    refusal = _refusal({"ros_distro": "jazzy", "cmd_type": "twist"}, "host")
    assert "create3_republisher" in refusal and "stand still" in refusal


# --------------------------------------------------------------------------- secure DDS (4)


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("middleware", LAB_MIDDLEWARES)
@pytest.mark.parametrize("role", ROLES)
def test_secure_dds_without_the_relay_is_refused(distro, middleware, role):
    """The Create 3 (on Jazzy its republisher too) is outside the SROS2 domain: only the relay
    reaches it. Bridged cases keep DDS plain on each machine and need no relay."""
    settings = (
        registry.get(middleware).security_settings if not registry.get(middleware).own_security else ["none"]
    )
    assert settings, middleware
    for security in ["none", *settings]:
        for relay in ("false", "true"):
            args = {"ros_distro": distro, "middleware": middleware, "security": security, "relay": relay}
            if security != "none":
                args["keystore"] = "/k"
            refusal = _refusal(args, role)
            secure_dds = security != "none" and middleware in DDS_MIDDLEWARES
            if secure_dds and relay == "false":
                _one_line(refusal, "relay:", "relay:=true", "--host-arg relay=true --robot-arg relay=true")
            else:
                assert refusal == "", (args, refusal)


def test_every_dds_security_setting_is_swept():
    assert DDS_MIDDLEWARES and all(len(registry.get(m).security_settings) >= 2 for m in DDS_MIDDLEWARES)


# --------------------------------------------------------------------------- interfaces (2)


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("middleware", LAB_MIDDLEWARES)
@pytest.mark.parametrize("dds", ["cyclonedds", "fastrtps"])
def test_robot_dds_pinned_to_the_base_link_only_is_refused(distro, middleware, dds):
    """CycloneDDS uses exactly the interfaces its config lists: base_interface alone on plain DDS
    would keep the robot's nodes on usb0, never meeting the host over the Wi-Fi."""
    for role in ROLES:
        for interfaces in (
            {},
            {"base_interface": "usb0"},
            {"network_interface": "wlan0"},
            {"base_interface": "usb0", "network_interface": "wlan0"},
        ):
            args = {"ros_distro": distro, "middleware": middleware, "dds": dds, **interfaces}
            refusal = _refusal(args, role)
            cfg_rmw = registry.get(middleware).lab_rmw or dds
            plain_dds = registry.get(middleware).lab_bridge is None and cfg_rmw == "cyclonedds"
            if role == "robot" and plain_dds and interfaces == {"base_interface": "usb0"}:
                _one_line(refusal, "network_interface", "usb0", "network_interface:=wlan0")
            else:
                assert refusal == "", (role, args, refusal)


# --------------------------------------------------------------------------- an RMW that is not DDS


@pytest.mark.parametrize("distro", DISTROS)
@pytest.mark.parametrize("middleware", LAB_MIDDLEWARES)
@pytest.mark.parametrize("role", ROLES)
def test_nodes_on_an_rmw_the_base_cannot_hear_are_refused_unless_a_dry_run(distro, middleware, role):
    """rmw-zenoh puts every kit node on rmw_zenoh_cpp, the link monitor's relay included (one RMW per
    process), and the Create 3 (on Jazzy create3_republisher too) speaks DDS only: the base would
    stand still while the trial completed. A dry run drives nothing and stays allowed."""
    speaks_dds = registry.get(middleware).lab_rmw_speaks_dds
    for relay in ("false", "true"):
        for dry_run in ("false", "true"):
            args = {"ros_distro": distro, "middleware": middleware, "relay": relay, "dry_run": dry_run}
            try:
                parse_launch_args(args, role, environ={})
                refusal = ""
            except LaunchArgError as exc:
                refusal = str(exc)
            if speaks_dds or dry_run == "true":
                assert refusal == "", (args, refusal)
            else:
                _one_line(refusal, "middleware:", middleware, "rmw_zenoh_cpp", "stand still", "dry_run:=true")
                assert "zenoh-peer" in refusal


def test_a_campaign_run_on_rmw_zenoh_is_refused_before_any_trial_starts():
    """rmw-zenoh reaches a lab trial through the run's --host-arg/--robot-arg (campaigns name the
    twin's middlewares): refused before the first trial, naming the side and the fix."""
    requests = load_trials(TRIALS / "seed-study.yaml", ros_distro="jazzy")[1][:1]
    both = {"middleware": "rmw-zenoh"}
    with pytest.raises(LaunchArgError) as refused:
        refuse_before_start(requests, "jazzy", both, both)
    _one_line(str(refused.value), requests[0].name, "host side", "middleware: rmw-zenoh", "dry_run:=true")
    refuse_before_start(requests, "jazzy", {**both, "dry_run": "true"}, {**both, "dry_run": "true"})


def test_with_both_interfaces_the_robot_lists_wifi_and_base_link():
    from fieldtest.middleware.dds.lab import cyclonedds_xml

    cfg = parse_launch_args(
        {"ros_distro": "jazzy", "base_interface": "usb0", "network_interface": "wlan0"}, "robot", environ={}
    )
    xml = cyclonedds_xml(cfg)
    assert re.findall(r'NetworkInterface name="(\w+)"', xml) == ["wlan0", "usb0"]


# --------------------------------------------------------------------------- campaigns


def _lab_campaigns() -> list[Path]:
    paths = []
    for path in sorted(TRIALS.glob("*.yaml")):
        _, trials = load_trials(path)
        if trials[0].robot_model.startswith("turtlebot4"):
            paths.append(path)
    return paths


def test_the_lab_campaigns_include_a_jazzy_smoke_campaign():
    names = {p.name for p in _lab_campaigns()}
    assert {"smoke.yaml", "smoke-jazzy.yaml", "seed-study.yaml"} <= names
    campaign, trials = load_trials(TRIALS / "smoke-jazzy.yaml")
    assert campaign.lab.ros_distro == "jazzy" and {t.cmd_type for t in trials} == {"twist_stamped"}


@pytest.mark.parametrize("distro", DISTROS)
def test_shipped_lab_campaigns_pass_on_both_distros_with_the_guides_arguments(distro):
    for path in _lab_campaigns():
        _, trials = load_trials(path, ros_distro=distro)
        assert {t.cmd_type for t in trials} == {"twist" if distro == "humble" else "twist_stamped"}, path
        refuse_before_start(trials, distro, GUIDE_HOST_ARGS, GUIDE_ROBOT_ARGS)


def test_the_guides_run_command_has_the_arguments_the_tests_assume():
    guide = (ROOT / "docs" / "lab-guide.md").read_text()
    run = re.search(r"```bash\n(fieldtest lab run trials/seed-study\.yaml.*?)```", guide, re.S).group(1)
    for name, value in GUIDE_ROBOT_ARGS.items():
        assert f"--robot-arg {name}={value}" in run
    assert "--host-arg network_interface=" in run and "--host-arg relay=true" in run


def _old_campaign(tmp_path: Path) -> Path:
    """smoke.yaml as shipped before: an explicit Twist for a Humble robot."""
    text = (TRIALS / "smoke.yaml").read_text().replace("cmd_type: auto", "cmd_type: twist")
    path = tmp_path / "smoke-old.yaml"
    path.write_text(text)
    return path


def test_lab_run_refuses_twist_on_jazzy_before_anything_starts(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["run", str(_old_campaign(tmp_path)), "--ros-distro", "jazzy", "--robot", "nobody@192.0.2.1"]
    argv += ["--runs-dir", str(runs), "--yes"]
    assert fieldtest_main(["lab", *argv]) == 2
    err = capsys.readouterr().err.strip()
    _one_line(err, "smoke-old.yaml", "cmd_type: twist on ROS 2 jazzy", "create3_republisher")
    assert not runs.exists()  # no trial directory: nothing was started


def test_lab_run_refuses_secure_dds_without_relay_before_anything_starts(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["run", str(TRIALS / "seed-study.yaml"), "--robot", "nobody@192.0.2.1", "--runs-dir", str(runs)]
    argv += ["--host-arg", "network_interface=wlp2s0", "--robot-arg", "network_interface=wlan0", "--yes"]
    assert fieldtest_main(["lab", *argv]) == 2
    err = capsys.readouterr().err.strip()
    _one_line(err, "seed-study.yaml", "seed-study-dds-on-r0", "relay:=true")
    assert not runs.exists()


def test_lab_run_refuses_the_base_link_alone_before_anything_starts(tmp_path, capsys):
    runs = tmp_path / "runs"
    argv = ["run", str(TRIALS / "smoke-jazzy.yaml"), "--robot", "nobody@192.0.2.1", "--runs-dir", str(runs)]
    argv += ["--robot-arg", "base_interface=usb0", "--yes"]
    assert fieldtest_main(["lab", *argv]) == 2
    _one_line(capsys.readouterr().err.strip(), "smoke-jazzy-dds-r0 (robot side)", "network_interface:=wlan0")
    assert not runs.exists()


@pytest.mark.parametrize("distro", DISTROS)
def test_every_campaign_in_trials_passes_or_is_refused_with_one_line(distro):
    """`fieldtest lab run` on any shipped campaign: a lab campaign passes the checks, a twin one is
    refused before anything starts, naming robot_model and the command that runs it."""
    lab = set(_lab_campaigns())
    for path in sorted(TRIALS.glob("*.yaml")):
        _, trials = load_trials(path, ros_distro=distro)
        if path in lab:
            refuse_before_start(trials, distro, GUIDE_HOST_ARGS, GUIDE_ROBOT_ARGS)
            continue
        with pytest.raises(LaunchArgError) as info:
            refuse_before_start(trials, distro, GUIDE_HOST_ARGS, GUIDE_ROBOT_ARGS)
        _one_line(str(info.value), "robot_model: twin-create3", "fieldtest campaign")


NAMESPACE_ARGUMENT = re.compile(r"(?:--namespace[ =]|namespace:=)(\S*)")
COMMAND_SPAN = re.compile(r"`((?:fieldtest|python3|ros2|mosquitto\w*) [^`]*)`")


def test_the_guides_commands_use_the_shipped_campaigns_namespace():
    """A stock TurtleBot 4 and every shipped lab campaign have no namespace; a command of the guide
    with another one (keys, broker ACL, the manual stop) would not match the campaign it serves. Only
    section 3.2's Namespace paragraph names one, for a robot given one."""
    lab_days = [
        path for path in _lab_campaigns() if not path.name.startswith("rehearsal")
    ]  # not the rehearsal's robot
    assert {"smoke.yaml", "smoke-jazzy.yaml", "seed-study.yaml"} <= {path.name for path in lab_days}
    namespaces = {t.transport.namespace for path in lab_days for t in load_trials(path)[1]}
    assert namespaces == {""}, namespaces
    guide = (ROOT / "docs" / "lab-guide.md").read_text()
    start = guide.find("**Namespace.**")
    if start >= 0:
        guide = guide[:start] + guide[guide.index("\n\n", start) :]
    commands = re.findall(r"```bash\n(.*?)```", guide, re.S) + COMMAND_SPAN.findall(guide.replace("\n", " "))
    # "<ns>": the robot's namespace, whatever it is (the measure-stop recipe)
    named = [
        (c, n) for c in commands for n in NAMESPACE_ARGUMENT.findall(c) if n.strip("\"'") not in ("", "<ns>")
    ]
    assert not named, named
    assert not [c for c in commands if re.search(r"(?<![\w<>])/tb4/", c)]
