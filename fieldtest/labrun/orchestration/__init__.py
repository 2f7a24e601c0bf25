"""Running lab trials: the runner, the robot side over ssh, the pre-flight, the launch plans, the
bundle for the Pi, the clock sync state."""
