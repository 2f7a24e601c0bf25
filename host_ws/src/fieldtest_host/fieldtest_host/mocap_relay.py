"""mocap_relay: a ROS 2 mocap driver's output written as the kit's mocap bag (rclpy glue over
fieldtest.labrun.nodelogic.mocap.MocapRelay).

The ROS-free NatNet recorder is the default; use this node when the lab runs a ROS 2 driver anyway.

Parameters:
  source (str)           mocap4r2 (mocap4r2_msgs/RigidBodies) or pose (geometry_msgs/PoseStamped)
  topic (str)            rigid_bodies for mocap4r2_optitrack_driver; /vrpn_mocap/<name>/pose for
                         vrpn_mocap; the pose topic of mocap_optitrack
  rigid_body_name (str)  mocap4r2 only: the body to follow (Motive's streaming id, e.g. "1")
  rigid_body_id (int)    recorded in the frames
  up_axis (str)          y (Motive default, mocap4r2 and vrpn_mocap pass it through) or z
                         (mocap_optitrack converts to Z up itself, or Motive streams Z up)
  trial_dir (str)        the bag goes to <trial_dir>/mocap

Driver messages are stamped by the driver on arrival (host clock, like the NatNet recorder).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.qos import qos_profile_sensor_data

    from fieldtest.labrun.nodelogic.mocap import MocapRelay
    from fieldtest.labrun.nodelogic.rclpy_transport import init_without_signal_handlers, spin_in_background
    from fieldtest.procs import stop_on_signals

    init_without_signal_handlers(list(sys.argv if argv is None else argv))
    node = rclpy.create_node("mocap_relay")
    source = node.declare_parameter("source", "mocap4r2").value
    topic = node.declare_parameter("topic", "rigid_bodies").value
    # rcl reads parameter values as YAML 1.1: a bare `-p up_axis:=y` arrives as the boolean true and
    # `-p rigid_body_name:=1` as an integer; take both as the text that was typed.
    any_type = ParameterDescriptor(dynamic_typing=True)
    name = str(node.declare_parameter("rigid_body_name", "1", any_type).value)
    body_id = int(node.declare_parameter("rigid_body_id", 1).value)
    up_axis = node.declare_parameter("up_axis", "y", any_type).value
    up_axis = "y" if up_axis is True else str(up_axis).lower()
    if up_axis not in ("y", "z"):
        node.get_logger().fatal(f"parameter up_axis:={up_axis}: expected y or z")
        node.destroy_node()
        rclpy.try_shutdown()
        return 2
    trial_dir = node.declare_parameter("trial_dir", ".").value
    # Signals are the relay's from before its recording opens: a Ctrl-C while the executor started
    # raised KeyboardInterrupt there, and the recording was never closed.
    with stop_on_signals() as stop:
        relay = MocapRelay(trial_dir, up_axis, body_id)
        if source == "mocap4r2":
            from mocap4r2_msgs.msg import RigidBodies

            node.create_subscription(
                RigidBodies, topic, lambda m: relay.on_rigid_bodies(m, name), qos_profile_sensor_data
            )
        else:
            from geometry_msgs.msg import PoseStamped

            node.create_subscription(PoseStamped, topic, relay.on_pose, qos_profile_sensor_data)
        node.get_logger().info(f"recording {source} {topic} (up axis {up_axis}) to {trial_dir}/mocap")
        executor, spinner = spin_in_background(node)
        while not stop.wait(1.0):
            pass
    relay.close()
    node.get_logger().info(f"{relay.frames} frames, {relay.valid} with the body tracked")
    executor.shutdown(timeout_sec=1.0)
    spinner.join(timeout=1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
