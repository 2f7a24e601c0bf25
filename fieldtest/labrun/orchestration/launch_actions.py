"""ROS 2 launch actions from a ``LaunchPlan`` (the only part of the lab launch logic that needs ROS).

``host.launch.py`` and ``robot.launch.py`` call ``declare_arguments(role)`` and
``generate_actions(context, role)``; all decisions are in ``fieldtest.labrun.orchestration.launchplan``. The
``launch`` and ``launch_ros`` modules are imported inside the functions, so this module can be
compiled and imported on a machine without ROS.
"""

from __future__ import annotations

from typing import Any

from fieldtest.labrun.configuration.launchsettings import LAUNCH_ARGUMENTS
from fieldtest.labrun.orchestration.launchplan import PREFLIGHT_ARGUMENTS, LaunchPlan, NodeSpec, launch_plan
from fieldtest.linkconfig import Role
from fieldtest.middleware import registry

ARGUMENT_HELP = {
    "middleware": " | ".join(registry.names(lab=True)),
    "security": "none | sros2 | rtps-sign | ... (DDS) | mtls-acl (Zenoh, MQTT)",
    "qos": "QoS profile: default | sensor | parameters | fernandez-a .. fernandez-e",
    "namespace": "robot namespace, e.g. /tb4 (ROBOT_NAMESPACE)",
    "plan": "YAML file of SquarePlan fields; empty = the seed study's square",
    "ros_distro": "auto ($ROS_DISTRO) | humble | jazzy",
    "cmd_type": "auto (humble: twist, jazzy: twist_stamped) | twist | twist_stamped",
    "trial_dir": "record into this trial directory (empty: no recording, no go-file wait)",
    "base_namespace": "robot: the Create 3's namespace; auto = <namespace>/_do_not_use on Jazzy",
    "preflight": "robot only: check the Create 3 parameters and battery first (true/false)",
    "preflight_warn_only": "robot only: report pre-flight failures as warnings and start anyway",
    "min_battery_percent": "robot only: pre-flight battery threshold",
}


def argument_names(role: Role) -> list[str]:
    names = list(LAUNCH_ARGUMENTS)
    return names + list(PREFLIGHT_ARGUMENTS) if role == "robot" else names


def declare_arguments(role: Role) -> list[Any]:
    from launch.actions import DeclareLaunchArgument

    # Empty default = "not given": the settings module applies its own (documented) defaults.
    return [
        DeclareLaunchArgument(
            name, default_value="", description=ARGUMENT_HELP.get(name, name.replace("_", " "))
        )
        for name in argument_names(role)
    ]


def given_arguments(context: Any, role: Role) -> dict[str, str]:
    from launch.substitutions import LaunchConfiguration

    values = {name: LaunchConfiguration(name).perform(context) for name in argument_names(role)}
    return {name: value for name, value in values.items() if value != ""}


def _node(spec: NodeSpec) -> Any:
    from launch_ros.actions import Node

    return Node(
        package=spec.package,
        executable=spec.executable,
        name=spec.name,
        namespace=spec.namespace or None,
        parameters=[spec.parameters],
        arguments=["--ros-args", *spec.ros_arguments] if spec.ros_arguments else [],
        additional_env=spec.env or None,
        output="screen",
        emulate_tty=True,
    )


def actions_for(plan: LaunchPlan) -> list[Any]:
    from launch.actions import (
        ExecuteProcess,
        LogInfo,
        RegisterEventHandler,
        SetEnvironmentVariable,
        Shutdown,
        UnsetEnvironmentVariable,
    )
    from launch.event_handlers import OnProcessExit

    actions: list[Any] = [LogInfo(msg=line) for line in plan.summary()]
    actions += [UnsetEnvironmentVariable(name) for name in plan.environment.unset]
    actions += [SetEnvironmentVariable(name, value) for name, value in plan.environment.set.items()]
    for proc in plan.processes:
        actions.append(
            ExecuteProcess(
                cmd=proc.argv, name=proc.name, additional_env=proc.env, output="screen", sigterm_timeout="5"
            )
        )
    nodes = [_node(spec) for spec in plan.nodes]
    # The kit's node ends the trial: when it exits, everything this launch started is stopped.
    for node in nodes:
        actions.append(
            RegisterEventHandler(
                OnProcessExit(target_action=node, on_exit=[Shutdown(reason="trial node exited")])
            )
        )
    if plan.gate is None:
        return actions + nodes
    gate = _node(plan.gate)

    def after_gate(event: Any, _context: Any) -> list[Any]:
        if event.returncode == 0:
            return nodes
        return [LogInfo(msg="pre-flight refused the trial (see above)"), Shutdown(reason="pre-flight failed")]

    return [*actions, gate, RegisterEventHandler(OnProcessExit(target_action=gate, on_exit=after_gate))]


def generate_actions(context: Any, role: Role) -> list[Any]:
    """OpaqueFunction body: parse the arguments, write the configs, return the actions."""
    plan = launch_plan(given_arguments(context, role), role)
    plan.write_files()
    return actions_for(plan)
