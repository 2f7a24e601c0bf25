import subprocess
import sys

from fieldtest.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in SUBCOMMANDS:
        assert name in out


def test_unknown_subcommand_is_one_line_error(capsys):
    assert main(["fly"]) == 2
    assert "unknown command 'fly'" in capsys.readouterr().err


def test_plan_command_prints_the_seed_square(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "fieldtest.cli", "plan"], capture_output=True, text=True, check=True
    )
    assert "side 0.990 m in 3.000 s" in out.stdout
    assert "lap 1 corners: (0.99, 0.00), (0.99, 0.99), (0.00, 0.99), (0.00, 0.00)" in out.stdout
    bad = tmp_path / "plan.yaml"
    bad.write_text("command_rate_hz: 7.5\n")
    res = subprocess.run(
        [sys.executable, "-m", "fieldtest.cli", "plan", str(bad)], capture_output=True, text=True
    )
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and str(bad) in res.stderr and "cannot represent" in res.stderr


def test_every_subcommand_module_exists():
    import importlib

    for module, func, _ in SUBCOMMANDS.values():
        assert callable(getattr(importlib.import_module(module), func))


def test_a_kit_error_raised_deep_inside_a_command_is_one_line_naming_the_command_and_exit_2(tmp_path):
    """The keystore module finds no governance file: its KeystoreError comes up through `fieldtest
    keys` to the command line's one handler, which names the command and the problem."""
    keystore = tmp_path / "no-keystore"
    argv = ["keys", "governance", "--keystore", str(keystore), "--setting", "rtps-encrypt"]
    done = subprocess.run([sys.executable, "-m", "fieldtest.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith(f"fieldtest keys: {keystore}/fieldtest/governance/rtps-encrypt.p7s: ")
    assert "no governance for setting 'rtps-encrypt'" in done.stderr


def test_debug_shows_the_traceback_of_a_kit_error_instead(tmp_path):
    argv = [sys.executable, "-m", "fieldtest.cli", "analyze", str(tmp_path), "--no-plots"]
    plain = subprocess.run(argv, capture_output=True, text=True)
    assert plain.returncode == 2
    assert (
        plain.stderr
        == f"fieldtest analyze: {tmp_path}/trial.yaml: missing (is {tmp_path} a trial directory?)\n"
    )
    debug = subprocess.run([*argv, "--debug"], capture_output=True, text=True)
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr and "TrialFormatError" in debug.stderr


def test_every_error_class_of_the_kit_derives_from_fieldtest_error():
    """So the command line's one ``except FieldtestError`` covers them all."""
    import ast
    import builtins
    import importlib
    from pathlib import Path

    from fieldtest.errors import FieldtestError

    package = Path(__file__).resolve().parents[1] / "fieldtest"
    exceptions = {name for name in dir(builtins) if name.endswith(("Error", "Exception"))}
    # control flow inside the lab runner (caught there, never reaches the command line)
    internal = {"fieldtest.labrun.orchestration.labrunner.AbortTrial", "fieldtest.lifecycle.Interrupted"}
    found, outside = 0, []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and any(b in exceptions or b.endswith("Error") for b in bases):
                cls = getattr(importlib.import_module(module), node.name)
                found += 1
                if not issubclass(cls, FieldtestError) and f"{module}.{node.name}" not in internal:
                    outside.append(f"{module}.{node.name}")
    assert found >= 38
    assert outside == []
