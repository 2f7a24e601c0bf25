"""Lab deployment without ROS: everything the ROS 2 launch files and nodes decide, as plain functions.

The lab's rclpy nodes (``host_ws``, ``robot_ws``) and launch files are thin glue over this package:

- ``configuration``: launch arguments (``middleware:=``, ``security:=``, ``qos:=``, ``namespace:=``,
  ``plan:=`` ...) parsed and checked into ``LabLaunch``, and built from a ``TrialRequest``.
- ``nodelogic``: the square driver and link monitor over any ``Transport``, the e-stop, the
  geofence, the mocap bridge, the Create 3 parameter file and check, the UDP clock.
- ``orchestration``: the lab runner, the robot side over ssh, the pre-flight, the launch plans and
  their runner, the bundle for the Pi, the clock sync state.
- ``rehearsal``: the one-machine rehearsal: the simulated base, the stand-ins.

Each middleware's lab side (RMW environment, bridge, broker and router configs) lives with its
family in ``fieldtest.middleware``.
"""
