#!/usr/bin/env bash
# Install the fieldtest kit's robot side from this bundle, with no package registry (made by
# `fieldtest lab bundle`; docs/lab-guide.md section 3.1).
#   bash install.sh                  the kit into the robot user's site of the system python3, then
#                                    colcon build of robot_ws against /opt/ros/$ROS_DISTRO (jazzy)
#   PYTHON=/path/venv/bin/python bash install.sh --no-colcon    into that venv, no ROS build
# The user site, not a venv: `ros2 launch` and colcon's console scripts run /usr/bin/python3, which
# reads ~/.local/lib/python3.X/site-packages but no venv; system packages (python3-numpy, python3-yaml,
# rclpy under /opt/ros) that satisfy a requirement are kept, so nothing of ROS's own is shadowed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
COLCON=1
for arg in "$@"; do
  case "$arg" in
    --no-colcon) COLCON=0 ;;
    *) echo "install.sh: unknown argument $arg (only --no-colcon)" >&2; exit 2 ;;
  esac
done

# only this bundle's wheels: no pip.conf or PIP_* setting adds an index or another wheel folder
for name in $(compgen -e | grep '^PIP_' || true); do unset "$name"; done
export PIP_CONFIG_FILE=/dev/null
pip_wheel=$(ls "$HERE"/wheels/pip-*.whl | tail -n 1)
kit_wheel=$(ls "$HERE"/wheels/fieldtest-*.whl | tail -n 1)
if "$PYTHON" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  where=()                                         # a venv: install into it
else
  where=(--user --break-system-packages)           # Ubuntu 24.04 marks its python3 externally managed
fi
pip=("$PYTHON" "$pip_wheel/pip" --disable-pip-version-check install --no-index --find-links "$HERE/wheels" "${where[@]}")
"${pip[@]}" -r "$HERE/robot-requirements.txt" -c "$HERE/robot-constraints.txt"
"${pip[@]}" --no-deps --force-reinstall "$kit_wheel"
"$PYTHON" -c 'import fieldtest.labrun.orchestration.launch_actions, fieldtest.labrun.nodelogic.monitor'
echo "fieldtest installed for $PYTHON (${where[*]:-venv})"

if [ "$COLCON" = 1 ]; then
  distro=${ROS_DISTRO:-jazzy}
  if [ ! -f "/opt/ros/$distro/setup.bash" ] || ! command -v colcon >/dev/null; then
    echo "install.sh: robot_ws needs /opt/ros/$distro and colcon (apt, before the lab day: docs/lab-guide.md 3.1); the Python part is installed" >&2
    exit 1
  fi
  # the apt packages no bundle carries (docs/lab-guide.md 3.1): refused here, not as a failed build
  missing=()
  for package in $("$PYTHON" -c 'import sys; from fieldtest.labrun.orchestration.bundle import robot_apt_packages; print(*robot_apt_packages(sys.argv[1]))' "$distro"); do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q ' installed$' || missing+=("$package")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "install.sh: apt packages missing: ${missing[*]}; with an internet route: sudo apt install ${missing[*]} (zenoh-bridge-ros2dds from Eclipse Zenoh's repository: docs/lab-guide.md 3.1); the Python part is installed" >&2
    exit 1
  fi
  set +u; source "/opt/ros/$distro/setup.bash"; set -u
  cd "$HERE/robot_ws"
  colcon build --symlink-install
  echo "robot_ws built: source $HERE/robot_ws/install/setup.bash"
fi
