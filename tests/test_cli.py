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
