#!/usr/bin/env bash
# A ROS 2 environment from the Python package index's ROS 2 wheels, in a venv of its own (.venv-ros):
# rclpy with rmw_fastrtps_cpp, the message packages, and the kit's fieldtest_msgs built from
# host_ws/src/fieldtest_msgs with the wheels' rosidl + ament_cmake and Debian's cmake/ninja/gcc.
# The kit itself and the lab packages (fieldtest_host, fieldtest_robot) are installed into it too, so
# the real rclpy nodes of host_ws/ and robot_ws/ run here. Idempotent: a second run only checks.
# Kept apart from .venv: the wheels' bootstrapper re-executes the interpreter at every start.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DISTRO=${FIELDTEST_ROS_DISTRO:-jazzy}
VENV="$ROOT/.venv-ros"
PY="$VENV/bin/python"
REQS="$ROOT/tools/ros/$DISTRO-requirements.txt"
CONSTRAINTS="$ROOT/tools/ros/$DISTRO-constraints.txt"
MSG_PKG="$ROOT/host_ws/src/fieldtest_msgs"
BUILD="$VENV/build/fieldtest_msgs"
STAMP="$VENV/.fieldtest-ros-stamp"
CACHE_ROOT="${FIELDTEST_CACHE:-$HOME/.cache/fieldtest}"

inputs_hash() {
  cat "$REQS" "$CONSTRAINTS" "$MSG_PKG/CMakeLists.txt" "$MSG_PKG/package.xml" "$ROOT"/fieldtest/msg/*.msg \
    "$ROOT/tools/install_ros.sh" | sha256sum | cut -d' ' -f1
}

ready() {
  [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(inputs_hash)" ] &&
    "$PY" -c "import rclpy, fieldtest_msgs.msg, fieldtest_host, fieldtest_robot, fieldtest" 2>/dev/null
}

if ready; then
  echo "[install-ros] ROS 2 $DISTRO environment ready: $VENV"
  exit 0
fi

source "$ROOT/tools/apt.sh"
apt_install install-ros cmake ninja-build gcc g++ python3-dev

echo "[install-ros] ROS 2 $DISTRO wheels into $VENV (pinned: $(basename "$REQS"))"
[ -x "$PY" ] || python3 -m venv "$VENV"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q -r "$REQS" -c "$CONSTRAINTS"

# The wheels' CMake export files name the Python of the machine that built them; point them here.
py_include=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
np_include=$("$PY" -c "import numpy; print(numpy.get_include())")
{ grep -rlZ --include='*.cmake' '/opt/python/cp311-cp311' "$VENV/share" 2>/dev/null || true; } |
  xargs -0 -r sed -i \
    -e "s#/opt/python/cp311-cp311/include/python3.11#$py_include#g" \
    -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$np_include#g"

# fieldtest_msgs as installed once per inputs and Python, kept outside the clone: a clean clone copies
# it into its venv instead of building it again (the prefix is rewritten in its text files)
msgs_cache() {
  local py
  py=$("$PY" -c "import sys; print(sys.version.split()[0])")
  echo "$CACHE_ROOT/fieldtest_msgs-$(inputs_hash | cut -c1-16)-py$py-$(uname -m)"
}

restore_msgs() {
  local cache=$1 built_prefix
  [ -f "$cache/prefix" ] || return 1
  built_prefix=$(cat "$cache/prefix")
  tar -C "$cache/tree" -cf - . | tar -C "$VENV" -xf -
  if [ "$built_prefix" != "$VENV" ]; then
    (cd "$VENV" && grep -lIZF "$built_prefix" $(cat "$cache/files") 2>/dev/null || true) |
      (cd "$VENV" && xargs -0 -r sed -i "s#$built_prefix#$VENV#g")
  fi
  echo "[install-ros] fieldtest_msgs from $cache"
}

build_msgs() {
  echo "[install-ros] building fieldtest_msgs (rosidl, about a minute)"
  rm -rf "$BUILD" && mkdir -p "$BUILD"
  (
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
    cmake -S "$MSG_PKG" -B "$BUILD" -G Ninja -DCMAKE_INSTALL_PREFIX="$VENV" -DBUILD_TESTING=OFF \
      -DPython3_EXECUTABLE="$PY" >"$BUILD/configure.log" 2>&1 ||
      { tail -30 "$BUILD/configure.log"; echo "[install-ros] fieldtest_msgs: cmake configure failed ($BUILD/configure.log)"; exit 1; }
    cmake --build "$BUILD" --target install >"$BUILD/build.log" 2>&1 ||
      { tail -30 "$BUILD/build.log"; echo "[install-ros] fieldtest_msgs: build failed ($BUILD/build.log)"; exit 1; }
  )
}

save_msgs() {
  local cache=$1 tmp="$1.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp/tree"
  sed "s#^$VENV/##" "$BUILD/install_manifest.txt" >"$tmp/files"
  tar -C "$VENV" -cf - -T "$tmp/files" | tar -C "$tmp/tree" -xf -
  echo "$VENV" >"$tmp/prefix"
  rm -rf "$cache" && mv "$tmp" "$cache"
}

MSGS_CACHE=$(msgs_cache)
if ! { restore_msgs "$MSGS_CACHE" && "$PY" -c "import fieldtest_msgs.msg" 2>/dev/null; }; then
  build_msgs
  save_msgs "$MSGS_CACHE"
fi

# The kit (the nodes' logic) and the two ament_python lab packages, editable: they run from the clone.
# (setuptools warns at length about the ament_python setup.py files: kept in a log unless it fails)
"$PY" -m pip install -q -e "$ROOT" -e "$ROOT/host_ws/src/fieldtest_host" -e "$ROOT/robot_ws/src/fieldtest_robot" \
  >"$VENV/pip-lab-packages.log" 2>&1 ||
  { tail -30 "$VENV/pip-lab-packages.log"; echo "[install-ros] installing the kit and lab packages failed"; exit 1; }
"$PY" -c "import rclpy, fieldtest_msgs.msg, fieldtest_host, fieldtest_robot, fieldtest"
inputs_hash >"$STAMP"
echo "[install-ros] ROS 2 $DISTRO environment ready: $VENV"
