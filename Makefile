# Two commands set up a fresh machine (Debian 12 / Ubuntu 22.04+, as root or with sudo):
#   make demo   installs everything, then runs the digital-twin trial and prints where the report is
#   make test   installs everything, then runs the linters and the whole test suite
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo demo-quick test test-wheels lint bench

install:
	bash tools/install.sh

demo: install
	$(BIN)/fieldtest demo

demo-quick: install
	$(BIN)/fieldtest demo --quick

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# two workers: a process file's tests run in one of them, one after another; then the groups that
# must run alone (tests/conftest.py)
test: install lint test-wheels
	$(BIN)/pytest -q -n 2 --dist loadgroup -m "not alone"
	$(BIN)/pytest -q -m alone

# the wheels the bundle tests build from, downloaded once into the cache outside the clone: the
# suite itself reaches no package registry (fieldtest/testkit/wheelhouse.py)
test-wheels: install
	$(BIN)/python -m fieldtest.testkit.wheelhouse

bench: install
	$(BIN)/python benchmarks/bench_analysis.py
