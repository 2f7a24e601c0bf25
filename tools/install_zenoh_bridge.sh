#!/usr/bin/env bash
# Builds the real Zenoh bridge: zenohd and the zenoh-plugin-ros2dds dynamic plugin, both 1.10.2,
# from crates.io with --locked, into a cache outside the clone so later runs and CI's clean clones
# reuse it. zenohd loading the plugin is upstream's equivalent of zenoh-bridge-ros2dds (which is
# not published on crates.io). zenohd refuses a plugin built with another rustc, zenoh version or
# feature set, so both are built here by the same cargo into one target dir.
# The Rust toolchain: the one on PATH (or rustup's in ~/.cargo/bin) if it is at least $MIN_RUST,
# else the distribution's current one (Debian 12: cargo-web + rustc-web; its cargo/rustc packages
# are too old). FIELDTEST_BRIDGE_CHECK_TOOLCHAIN_ONLY=1 stops once the toolchain is ready (tests).
# First build: 25-60 min on 2 cores depending on load (58 min at load 7-9), a few GB of disk
# while building (the 40 MB of binaries are kept). Later runs only check the binaries.
# Idempotent; safe to run twice at once (flock).
set -euo pipefail

ZENOH_VERSION=1.10.2
CACHE_ROOT="${FIELDTEST_CACHE:-$HOME/.cache/fieldtest}"
PREFIX="$CACHE_ROOT/zenoh-$ZENOH_VERSION"
ZENOHD="$PREFIX/bin/zenohd"
PLUGIN="$PREFIX/lib/libzenoh_plugin_ros2dds.so"
STAMP="$PREFIX/BUILT"
APT_PACKAGES=(libclang-dev clang cmake gcc g++ make pkg-config python3)
# The newest rust-version among the crates of zenohd 1.10.2's Cargo.lock (uuid 1.27.0).
MIN_RUST=1.89
# Debian 12's current toolchain (bookworm-security); they install /usr/bin/cargo and /usr/bin/rustc.
DISTRO_RUST_PACKAGES=(cargo-web rustc-web)

log() { echo "[zenoh-bridge] $*"; }
source "$(dirname "$0")/apt.sh"

bridge_is_built() {
  [ -x "$ZENOHD" ] && [ -f "$PLUGIN" ] && [ -f "$STAMP" ] \
    && "$ZENOHD" --version 2>/dev/null | grep -q "v$ZENOH_VERSION" \
    && grep -qx "zenoh-plugin-ros2dds $ZENOH_VERSION" "$STAMP"
}

rust_version() { rustc --version 2>/dev/null | awk '{print $2}'; }

rust_is_current() {
  local version
  version=$(rust_version) && [ -n "$version" ] && command -v cargo >/dev/null &&
    [ "$(printf '%s\n%s\n' "$MIN_RUST" "${version%%-*}" | sort -V | head -1)" = "$MIN_RUST" ]
}

ensure_rust() {
  export PATH="$HOME/.cargo/bin:$PATH"
  rust_is_current && return 0
  local found
  found=$(rust_version || true)
  log "no Rust >= $MIN_RUST on PATH (found: ${found:-none}); installing ${DISTRO_RUST_PACKAGES[*]}"
  if apt-cache show "${DISTRO_RUST_PACKAGES[@]}" >/dev/null 2>&1; then
    apt_install zenoh-bridge "${DISTRO_RUST_PACKAGES[@]}"
    export PATH="/usr/bin:$PATH"  # ahead of an older toolchain elsewhere on PATH
    hash -r
  fi
  if ! rust_is_current; then
    found=$(rust_version || true)
    log "no Rust >= $MIN_RUST (found: ${found:-none}): install a current toolchain (rustup or the distribution's), then re-run"
    exit 1
  fi
}

if bridge_is_built; then
  log "ready: $ZENOHD + $PLUGIN ($ZENOH_VERSION)"
  exit 0
fi

mkdir -p "$PREFIX"
exec 9>"$PREFIX/.lock"
log "waiting for the build lock ($PREFIX/.lock)"
flock 9
if bridge_is_built; then
  log "ready (built by another run): $ZENOHD"
  exit 0
fi

apt_install zenoh-bridge "${APT_PACKAGES[@]}"

ensure_rust
log "toolchain: $(cargo --version), $(rustc --version)"
if [ "${FIELDTEST_BRIDGE_CHECK_TOOLCHAIN_ONLY:-}" = 1 ]; then
  log "toolchain ready; not building (FIELDTEST_BRIDGE_CHECK_TOOLCHAIN_ONLY=1)"
  exit 0
fi
export CARGO_TARGET_DIR="$PREFIX/target"
log "target dir $CARGO_TARGET_DIR"

if ! { [ -x "$ZENOHD" ] && "$ZENOHD" --version 2>/dev/null | grep -q "v$ZENOH_VERSION"; }; then
  log "building zenohd $ZENOH_VERSION (about 16 min on 2 cores)"
  cargo install zenohd --version "$ZENOH_VERSION" --locked --root "$PREFIX" --force
fi

# cargo install cannot build a library, so fetch the plugin's published source (with its
# Cargo.lock) through a throwaway package and build it in place with --locked.
SRC="$PREFIX/src/zenoh-plugin-ros2dds-$ZENOH_VERSION"
if [ ! -f "$SRC/Cargo.toml" ]; then
  FETCHER="$PREFIX/src/fetcher"
  mkdir -p "$FETCHER/src"
  printf '[package]\nname = "fetcher"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nzenoh-plugin-ros2dds = "=%s"\n' \
    "$ZENOH_VERSION" >"$FETCHER/Cargo.toml"
  : >"$FETCHER/src/lib.rs"
  manifest=$(cargo metadata --format-version 1 --manifest-path "$FETCHER/Cargo.toml" \
    | python3 -c 'import json,sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "zenoh-plugin-ros2dds"))')
  rm -rf "$SRC.tmp" && cp -r "$(dirname "$manifest")" "$SRC.tmp" && mv "$SRC.tmp" "$SRC"
fi
locked=--locked
[ -f "$SRC/Cargo.lock" ] || { log "note: the published plugin has no Cargo.lock; building unlocked"; locked=; }
log "building zenoh-plugin-ros2dds $ZENOH_VERSION (about 7 min more; CycloneDDS by cmake)"
cargo build --release $locked --manifest-path "$SRC/Cargo.toml"
mkdir -p "$PREFIX/lib"
cp "$CARGO_TARGET_DIR/release/libzenoh_plugin_ros2dds.so" "$PLUGIN.tmp" && mv "$PLUGIN.tmp" "$PLUGIN"
{
  echo "zenohd $ZENOH_VERSION"
  echo "zenoh-plugin-ros2dds $ZENOH_VERSION"
  rustc --version
} >"$STAMP"
log "ready: $ZENOHD + $PLUGIN"
# The intermediate build files are several GB; keep only what the kit runs.
rm -rf "$CARGO_TARGET_DIR"
