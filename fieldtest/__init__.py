"""Field-test kit core: ROS-free, shared by the twin, the lab nodes and the analysis."""
