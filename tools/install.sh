#!/usr/bin/env bash
# Installs everything the kit needs on a fresh Debian/Ubuntu machine: system packages through apt,
# Python packages into .venv, and the CycloneDDS Python binding built against Debian's CycloneDDS
# (the PyPI wheel lacks the DDS Security plugins). Idempotent: a second run only checks.
# FIELDTEST_INSTALL=demo (make demo) installs only what the twin trial needs, so a newcomer's first
# trial does not wait for the test tools, the ROS 2 environment or the Zenoh bridge's 25-60 min
# build; `make install` (and `make test`) bring the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
CACHE_ROOT="${FIELDTEST_CACHE:-$HOME/.cache/fieldtest}"
CYCLONEDDS_BINDING=0.10.2
APT_PACKAGES=(libddsc0debian cyclonedds-dev cyclonedds-tools mosquitto mosquitto-clients tcpdump
              iproute2 openssl python3-venv cmake gcc g++ pkg-config libns3-dev chromium
              openssh-server openssh-client rsync iputils-ping nftables libfastrtps-dev fastdds-tools
              openvpn)
# openssh, rsync: the two-machine rehearsal reaches its robot over sshd and collects by rsync;
# iputils-ping: the lab guide's link check, which that rehearsal runs;
# libfastrtps-dev (Fast DDS 2.9 with its DDS Security plugins), fastdds-tools (the discovery
# server): the fastdds middleware (fieldtest/middleware/fastdds);
# chromium: the campaign page test; ns-3 3.37: the 802.11 link (fieldtest/netem/ns3/wifi_link.cc);
# nftables: a cluster machine's firewall (docs/cluster.md), which tests/test_cluster.py applies;
# openvpn: the VPN network setting (fieldtest/netem/vpn.py)

# what the twin trial itself runs: the middlewares' libraries and the compilers of the C helpers
DEMO_APT_PACKAGES=(libddsc0debian cyclonedds-dev cyclonedds-tools mosquitto tcpdump iproute2 openssl
                   python3-venv cmake gcc g++ pkg-config libfastrtps-dev)
DEMO_ONLY=0
[ "${FIELDTEST_INSTALL:-}" = demo ] && DEMO_ONLY=1

source "$ROOT/tools/apt.sh"
if [ "$DEMO_ONLY" = 1 ]; then
  apt_install install "${DEMO_APT_PACKAGES[@]}"
else
  apt_install install "${APT_PACKAGES[@]}"
fi

# A prefix of symlinks to Debian's files: the binding's build looks for CYCLONEDDS_HOME/{lib,include}
# and writes the library's path under it into the wheel (cyclonedds/__library__.py). Kept outside
# the clone at one path per machine, so the wheel built once serves every clone, and deleting a
# clone never breaks another's binding.
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
CYCLONE_PREFIX="$CACHE_ROOT/cyclonedds-prefix-$multiarch"
mkdir -p "$CYCLONE_PREFIX/lib" "$CYCLONE_PREFIX/bin"
ln -sfn /usr/include "$CYCLONE_PREFIX/include"
for lib in /usr/lib/"$multiarch"/libddsc.so* /usr/lib/"$multiarch"/libcycloneddsidl.so*; do
  ln -sfn "$lib" "$CYCLONE_PREFIX/lib/$(basename "$lib")"
done
ln -sfn "/usr/lib/$multiarch/cmake" "$CYCLONE_PREFIX/lib/cmake"
ln -sfn /usr/bin/idlc "$CYCLONE_PREFIX/bin/idlc"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip

# the binding imports and loads libddsc
binding_ready() { "$VENV/bin/python" -c "import cyclonedds.domain" 2>/dev/null; }
# the binding's wheel, built once per machine, Python version and Debian CycloneDDS version
binding_wheel_dir() {
  local ddsc py
  ddsc=$(dpkg-query -W -f='${Version}' libddsc0debian 2>/dev/null || echo unknown)
  py=$("$VENV/bin/python" -c "import sys; print(f'{sys.version_info[0]}{sys.version_info[1]}')")
  echo "$CACHE_ROOT/cyclonedds-binding-$CYCLONEDDS_BINDING-py$py-ddsc$ddsc-$multiarch"
}
if ! binding_ready; then
  wheels=$(binding_wheel_dir)
  if ! ls "$wheels"/cyclonedds-*.whl >/dev/null 2>&1; then
    echo "[install] building the CycloneDDS Python binding against Debian's CycloneDDS (about a minute; kept in $wheels)"
    rm -rf "$wheels.tmp" && mkdir -p "$wheels.tmp"
    CYCLONEDDS_HOME="$CYCLONE_PREFIX" "$VENV/bin/python" -m pip wheel -q --no-cache-dir --no-deps \
      --no-binary cyclonedds -w "$wheels.tmp" "cyclonedds==$CYCLONEDDS_BINDING"
    rm -rf "$wheels" && mv "$wheels.tmp" "$wheels"
  fi
  "$VENV/bin/python" -m pip uninstall -q -y cyclonedds 2>/dev/null || true
  "$VENV/bin/python" -m pip install -q "$wheels"/cyclonedds-*.whl
  binding_ready || { echo "[install] the CycloneDDS binding built in $wheels does not load"; exit 1; }
fi
# the DDS transport's C stamping helper (send/arrival stamps at the CycloneDDS API); the Fast DDS
# transport's C++ helper (participants and stamps on Debian's libfastrtps; a minute of g++); the
# MQTT transport's arrival stamps (poll wake-ups stamped in C)
build_stamp_helpers() {
  "$VENV/bin/python" -c "from fieldtest.middleware.dds.ddsstamp import library; library()"
  "$VENV/bin/python" -c "from fieldtest.middleware.fastdds.stamp import library; library()"
  "$VENV/bin/python" -c "from fieldtest.transport.pollstamp import library; library()"
}
if [ "$DEMO_ONLY" = 1 ]; then
  "$VENV/bin/python" -m pip install -q -e .
  build_stamp_helpers
  echo "[install] ready for the twin trial: $VENV (make install brings the test tools, the ROS 2"
  echo "[install] environment of the lab nodes and the Zenoh bridge of the lab; 25-60 min the first time)"
  exit 0
fi
# cluster: Dask distributed, for campaigns across machines (fieldtest campaign --cluster)
"$VENV/bin/python" -m pip install -q -e ".[dev,cluster]"
# the userspace link emulator (used when the kernel has no netem); otherwise built on first use
"$VENV/bin/python" -c "from fieldtest.netem.forwarder import build_forwarder; build_forwarder()" || echo "[install] note: linkfwd not built (needs gcc)"
# the ns-3 802.11 link (about a minute of g++); otherwise built on first use of a wifi-80211 profile
"$VENV/bin/python" -c "from fieldtest.netem.wifi80211 import build_wifi_link; build_wifi_link()" || echo "[install] note: wifi_link not built (needs libns3-dev, g++)"
build_stamp_helpers
# the runtime dependencies at their pyproject minimums, cached outside the clone (tests run the kit on them)
bash "$ROOT/tools/install_minimums.sh" "$VENV/bin/python"
# the ROS 2 environment for the lab nodes (rclpy from the ROS 2 wheels, fieldtest_msgs): .venv-ros
bash "$ROOT/tools/install_ros.sh"
# the real Zenoh bridge (zenohd + ros2dds plugin), cached outside the clone; 25-60 min the first time
bash "$ROOT/tools/install_zenoh_bridge.sh"
echo "[install] ready: $VENV"
