#!/usr/bin/env bash
# Builds the venv of the kit's runtime dependencies pinned to their pyproject minimums (see
# fieldtest/testkit/minimums.py), from the package index, into the cache outside the clone, so the
# test that runs the kit on them (tests/test_install_minimums.py) downloads nothing. The kit itself
# is not installed there (the test runs the clone's code through PYTHONPATH): nothing is written
# into the clone. First build: about 8 minutes on 2 cores (psutil 5.9's source build, matplotlib's
# and numpy's wheels). Later runs only check. Idempotent; safe to run twice at once (flock).
# FIELDTEST_MINIMUMS_CHECK_ONLY=1 stops once the pins and the venv's place are known (tests of the
# install itself, which would otherwise download and build it again into their empty cache).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-.venv/bin/python}"  # the Python whose version the venv gets (the tests' own)

log() { echo "[minimums] $*"; }
DIR=$("$PYTHON" -m fieldtest.testkit.minimums path)
STAMP="$DIR/BUILT"
PINS=$("$PYTHON" -m fieldtest.testkit.minimums pins)

is_built() { [ -x "$DIR/venv/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PINS" ]; }

if is_built; then
  log "ready: $DIR"
  exit 0
fi
if [ "${FIELDTEST_MINIMUMS_CHECK_ONLY:-}" = 1 ]; then
  log "not building $DIR (FIELDTEST_MINIMUMS_CHECK_ONLY=1)"
  exit 0
fi
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
log "waiting for the build lock ($DIR/.lock)"
flock 9
if is_built; then
  log "ready (built by another run): $DIR"
  exit 0
fi

log "building $DIR (every dependency at its minimum, from the package index)"
rm -rf "$DIR/venv" "$STAMP"
printf '%s\n' "$PINS" >"$DIR/pins.txt"
# this pip installs into the new venv (--python): no second pip to bootstrap there
"$PYTHON" -m venv --without-pip "$DIR/venv"
"$PYTHON" -m pip --python "$DIR/venv/bin/python" install -q --requirement "$DIR/pins.txt"
"$PYTHON" -m pip --python "$DIR/venv/bin/python" check
printf '%s\n' "$PINS" >"$STAMP.tmp" && mv "$STAMP.tmp" "$STAMP"
log "ready: $DIR"
