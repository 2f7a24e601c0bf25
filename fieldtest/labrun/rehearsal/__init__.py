"""Rehearsing lab trials on one machine: the simulated base, the ROS-free stand-ins of the launch
files, the MQTT stand-in, the republisher."""
