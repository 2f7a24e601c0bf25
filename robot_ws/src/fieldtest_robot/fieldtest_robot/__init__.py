"""Robot (Raspberry Pi) side of the fieldtest kit's lab trials (rclpy glue over the ROS-free fieldtest package)."""
