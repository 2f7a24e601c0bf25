"""Create 3 parameter file and the pre-flight judgement of the base's parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fieldtest.labrun.cli import lab_main
from fieldtest.labrun.create3 import (
    Create3ParamError,
    battery_finding,
    check_create3,
    create3_param_file,
    format_findings,
    parse_param_dump,
    preflight_report,
    verdict,
)
from fieldtest.plan import SquarePlan

ROOT = Path(__file__).resolve().parents[1]
SEED = SquarePlan()


def _severity(findings, check):
    return next(f.severity for f in findings if f.check == check)


def test_shipped_parameter_file_is_the_generated_one_and_sets_what_the_plan_needs():
    shipped = ROOT / "robot_ws/src/fieldtest_robot/config/create3_params.yaml"
    assert shipped.read_text() == create3_param_file()
    params = parse_param_dump(shipped.read_text(), str(shipped))
    assert params == {"safety_override": "full", "reflexes_enabled": False}
    assert all(f.severity == "ok" for f in check_create3(params, SEED))


def test_default_safety_override_clamps_the_seed_studys_speed():
    findings = check_create3({"safety_override": "none", "reflexes_enabled": True}, SEED)
    assert _severity(findings, "speed cap") == "fail"
    detail = next(f.detail for f in findings if f.check == "speed cap")
    assert "clamped to 0.306 m/s" in detail and "0.918 m, not 0.990 m" in detail
    assert _severity(findings, "reflexes") == "warn"
    assert _severity(check_create3({"safety_override": "backup_only"}, SEED), "speed cap") == "fail"
    slow = SquarePlan(linear_speed_mps=0.3)
    assert _severity(check_create3({"safety_override": "none"}, slow), "speed cap") == "ok"


def test_unreadable_or_odd_parameters_fail():
    assert _severity(check_create3({}, SEED), "speed cap") == "fail"
    assert _severity(check_create3({"safety_override": "fully"}, SEED), "speed cap") == "fail"


def test_watchdog_shorter_than_a_few_command_periods_warns():
    ok = check_create3({"safety_override": "full", "wheels_stop_threshold_sec": 0.5}, SEED)
    assert _severity(ok, "watchdog") == "ok"
    short = check_create3({"safety_override": "full", "wheels_stop_threshold_sec": 0.1}, SEED)
    assert _severity(short, "watchdog") == "warn"


def test_param_dump_with_namespace_and_errors():
    dump = "/tb4/motion_control:\n  ros__parameters:\n    safety_override: full\n    reflexes_enabled: false\n    use_sim_time: false\n"
    assert parse_param_dump(dump)["safety_override"] == "full"
    with pytest.raises(Create3ParamError, match="no motion_control parameters"):
        parse_param_dump("/tb4/other:\n  ros__parameters: {a: 1}\n")
    with pytest.raises(Create3ParamError, match="not valid YAML"):
        parse_param_dump("a: [\n")


def test_battery_and_report():
    assert battery_finding(0.25, 30).severity == "fail"
    assert battery_finding(0.8, 30).severity == "ok"
    assert battery_finding(float("nan"), 30).severity == "fail"
    report = preflight_report({"safety_override": "none"}, SEED, 0.9, min_battery_percent=30)
    assert report["go"] is False
    warned = preflight_report({"safety_override": "none"}, SEED, 0.9, min_battery_percent=30, warn_only=True)
    assert warned["go"] is True and any(f["severity"] == "warn" for f in warned["findings"])
    assert format_findings(warned["findings"])[0].startswith("[WARN] speed cap:")
    go, _ = verdict(check_create3({"safety_override": "full"}, SEED))
    assert go


def test_cli_check_create3(tmp_path, capsys):
    dump = tmp_path / "dump.yaml"
    dump.write_text("/motion_control:\n  ros__parameters: {safety_override: none, reflexes_enabled: false}\n")
    assert lab_main(["check-create3", str(dump)]) == 1
    assert "[FAIL] speed cap" in capsys.readouterr().out
    assert lab_main(["create3-params", "--namespace", "/tb4"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["/**/motion_control"]["ros__parameters"]["safety_override"] == "full"
    assert "/tb4/motion_control" in out
