"""The lab nodes' logic, ROS-free: the square driver, the link monitor, the e-stop, the geofence,
the mocap relay, the rclpy transport, the UDP clock probe, the Create 3 pre-flight."""
