"""Lab deployment without ROS: everything the ROS 2 launch files and nodes decide, as plain functions.

The lab's rclpy nodes (``host_ws``, ``robot_ws``) and launch files are thin glue over this package:

- ``settings``: launch arguments (``middleware:=``, ``security:=``, ``qos:=``, ``namespace:=``,
  ``plan:=`` ...) parsed and checked into ``LabLaunch``, and built from a ``TrialRequest``.
- ``environment``: the RMW environment of every process (RMW_IMPLEMENTATION, ROS_LOCALHOST_ONLY on
  Humble / ROS_AUTOMATIC_DISCOVERY_RANGE on Jazzy, CYCLONEDDS_URI, SROS2 variables).
- ``bridges``: zenoh-bridge-ros2dds configs and command lines, mqtt_client parameter files,
  Mosquitto configs, rmw_zenoh routers, ``ros2 bag record`` command lines.
- ``create3``: the Create 3 parameter file and the pre-flight check of the base's parameters.
- ``driver`` / ``monitor``: the square driver and link monitor, over any ``Transport``.
- ``preflight``, ``remote``, ``runner``: the lab runner.
"""
