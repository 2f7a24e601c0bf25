"""ament_python package fieldtest_host. The logic lives in the fieldtest Python package (installed with pip
into the same Python the ROS 2 distro uses); this package holds the rclpy nodes and launch files."""

from glob import glob

from setuptools import setup

PACKAGE = "fieldtest_host"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="fieldtest maintainers",
    maintainer_email="maintainers@example.invalid",
    description="Host side of fieldtest lab trials: square driver node and launch file",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "square_driver = fieldtest_host.square_driver:main",
            "mocap_relay = fieldtest_host.mocap_relay:main",
        ],
    },
)
