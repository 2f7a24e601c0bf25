"""ament_python package fieldtest_robot. The logic lives in the fieldtest Python package (installed with pip
into the same Python the ROS 2 distro uses); this package holds the rclpy nodes and launch files."""

from glob import glob

from setuptools import setup

PACKAGE = "fieldtest_robot"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[PACKAGE],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="fieldtest maintainers",
    maintainer_email="maintainers@example.invalid",
    description="Robot side of fieldtest lab trials: link monitor, Create 3 pre-flight, launch file",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            "link_monitor = fieldtest_robot.link_monitor:main",
            "create3_preflight = fieldtest_robot.create3_preflight:main",
            "base_stop = fieldtest_robot.base_stop:main",
        ],
    },
)
