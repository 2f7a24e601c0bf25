# Two commands set up a fresh machine (Debian 12 / Ubuntu 22.04+, as root or with sudo):
#   make demo   installs what the twin trial needs, then runs it and prints where the report is
#   make test   installs everything, then runs the linters and the whole test suite
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-demo demo demo-quick test test-wheels lint bench

install:
	bash tools/install.sh

# the twin trial needs only part of the install (tools/install.sh, FIELDTEST_INSTALL=demo)
install-demo:
	FIELDTEST_INSTALL=demo bash tools/install.sh

demo: install-demo
	$(BIN)/fieldtest demo

demo-quick: install-demo
	$(BIN)/fieldtest demo --quick

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# three workers on two cores: the process tests mostly wait on trials that run in real time (about
# half the CPU idle with two workers); a process file's tests run in one worker, one after another;
# then the groups that must run alone (tests/conftest.py ALONE_GROUPS; with none, pytest's exit 5, no
# test selected, passes)
test: install lint test-wheels
	$(BIN)/pytest -q -n 3 --dist loadgroup -m "not alone"
	$(BIN)/pytest -q -m alone || test $$? -eq 5

# the wheels the bundle tests build from, downloaded once into the cache outside the clone: the
# suite itself reaches no package registry (fieldtest/testkit/wheelhouse.py)
test-wheels: install
	$(BIN)/python -m fieldtest.testkit.wheelhouse

bench: install
	$(BIN)/python benchmarks/bench_analysis.py
