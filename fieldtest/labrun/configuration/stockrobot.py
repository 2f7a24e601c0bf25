"""The TurtleBot 4 as shipped, per ROS 2 distro: what a lab unpacks before the kit touches it.

Each value names the upstream file it comes from. The two-machine rehearsal builds its robot from
this (fieldtest.testkit.twomachines), and the lab pre-flight compares a trial with what the robot's
own setup file says (fieldtest.labrun.orchestration.robotsetup).
"""

from __future__ import annotations

from dataclasses import dataclass

# Where turtlebot4_setup installs the robot's environment (debian/install: etc/turtlebot4 ->
# /etc/turtlebot4); scripts/turtlebot4_setup.sh appends `source $ROBOT_SETUP` to ~/.bashrc.
TURTLEBOT4_SETUP = "/etc/turtlebot4/setup.bash"
SETUP_VARIABLES = ("RMW_IMPLEMENTATION", "ROS_DOMAIN_ID", "ROBOT_NAMESPACE", "ROS_DISCOVERY_SERVER")


@dataclass(frozen=True)
class StockRobot:
    distro: str
    ubuntu: str
    setup: dict[str, str]  # /etc/turtlebot4/setup.bash's exports, in its order
    create3_rmw: str  # what turtlebot4-setup applies to the base (Domain ID, Namespace, RMW)
    create3_namespace: str
    # The system Python packages the kit imports, as the Ubuntu release ships them (its archive's
    # python3-<name>); pip keeps one that meets the kit's minimum.
    python_packages: dict[str, str]
    # Those of them a stock image has before the guide installs anything: ROS 2's own Python
    # dependencies (package.xml exec_depend of rosidl_generator_py: python3-numpy; rclpy:
    # python3-yaml; ros2cli: python3-psutil; sros2: python3-cryptography).
    preinstalled: tuple[str, ...] = ("numpy", "pyyaml", "psutil", "cryptography")

    @property
    def rmw(self) -> str:
        return self.setup["RMW_IMPLEMENTATION"]

    @property
    def namespace(self) -> str:
        return self.setup["ROBOT_NAMESPACE"]

    @property
    def domain_id(self) -> int:
        return int(self.setup["ROS_DOMAIN_ID"])

    def setup_bash(self) -> str:
        """/etc/turtlebot4/setup.bash as turtlebot4_setup installs it."""
        exports = "".join(f"export {k}={v}\n" for k, v in self.setup.items())
        return f"{exports}\nsource $WORKSPACE_SETUP\n"


def _setup(distro: str, extra: dict[str, str]) -> dict[str, str]:
    # turtlebot4_setup etc/turtlebot4/setup.bash (branch = distro); the same defaults are
    # turtlebot4_setup/conf.py's default_bash_conf.
    return {
        "CYCLONEDDS_URI": "/etc/turtlebot4/cyclonedds_rpi.xml",  # pins wlan0
        "FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/turtlebot4/fastdds_rpi.xml",  # an empty default profile
        "ROBOT_NAMESPACE": "",
        "ROS_DOMAIN_ID": "0",
        "ROS_DISCOVERY_SERVER": "",
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "TURTLEBOT4_DIAGNOSTICS": "1",
        "WORKSPACE_SETUP": f"/opt/ros/{distro}/setup.bash",
        "ROS_SUPER_CLIENT": "False",
        **extra,
    }


STOCK_ROBOTS = {
    "jazzy": StockRobot(
        distro="jazzy",
        ubuntu="24.04",
        setup=_setup("jazzy", {"ROBOT_SETUP": TURTLEBOT4_SETUP}),  # jazzy's file adds ROBOT_SETUP
        create3_rmw="rmw_fastrtps_cpp",  # turtlebot4_setup/turtlebot4_setup: update_create3
        create3_namespace="",
        # Ubuntu 24.04 (noble) python3-* packages
        python_packages={
            "numpy": "1.26.4",
            "pyyaml": "6.0.1",
            "pydantic": "1.10.14",
            "matplotlib": "3.6.3",
            "rich": "13.7.1",
            "paho-mqtt": "1.6.1",
            "psutil": "5.9.8",
            "cryptography": "41.0.7",
        },
    ),
    "humble": StockRobot(
        distro="humble",
        ubuntu="22.04",
        setup=_setup("humble", {}),
        create3_rmw="rmw_fastrtps_cpp",
        create3_namespace="",
        # Ubuntu 22.04 (jammy) python3-* packages
        python_packages={
            "numpy": "1.21.5",
            "pyyaml": "5.4.1",
            "pydantic": "1.8.2",
            "matplotlib": "3.5.1",
            "rich": "11.2.0",
            "paho-mqtt": "1.5.1",
            "psutil": "5.9.0",
            "cryptography": "3.4.8",
        },
    ),
}
