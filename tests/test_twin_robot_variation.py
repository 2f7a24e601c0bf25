"""A twin trial with a robot instance that has a base's systematic errors: the twin shows the robot's
own drift, recorded in trial.yaml, and the analysis gives it to the base.

One real twin trial on loopback (CycloneDDS, the twin robot and mocap processes): the wheel-diameter
ratio and wheelbase ratio set in ``twin`` reach the robot process (trial.yaml records them), the lap
drift's rest is the base's (the model with those errors driven by the planned commands predicts it
within 10 %), and what the base does not explain stays under 10 % of it.
"""

import pytest

from fieldtest.analysis import analyze_trial
from fieldtest.analysis.loading.trialrobot import BaseCalibration
from fieldtest.plan import SquarePlan
from fieldtest.record import TrialRequest, read_trial
from fieldtest.runner import run_twin_trial

PLAN = SquarePlan(side_duration_s=1.5, turn_rate_dps=90.0, laps=2, start_delay_s=0.5)


@pytest.mark.parametrize(("e_d", "e_b"), [(1.004, 0.99)])
def test_a_twin_robot_with_base_errors_drifts_as_the_base_predicts(tmp_path, e_d, e_b):
    request = TrialRequest(
        name="base-errors",
        plan=PLAN,
        transport={"middleware": "dds"},
        twin={"wheel_diameter_ratio": e_d, "wheelbase_ratio": e_b, "mocap_noise_m": 0.0},
    )
    result = run_twin_trial(request, tmp_path)
    assert result.end_reason == "completed", result.detail
    twin = read_trial(result.trial_dir).request.twin
    assert (twin.wheel_diameter_ratio, twin.wheelbase_ratio) == (e_d, e_b)
    calibration = BaseCalibration(robot="set", wheel_diameter_ratio=e_d, wheelbase_factor=e_b)
    metrics = analyze_trial(result.trial_dir, plots=False, base_calibration=calibration)
    assert metrics.trial.robot == f"twin-create3 E_d {e_d:g} E_b {e_b:g} turn slip 0"
    causes = metrics.drift_causes
    assert causes.rest_m > 0.01  # centimetres of the robot's own drift, where a nominal twin has none
    assert causes.base.systematic_m == pytest.approx(causes.rest_m, rel=0.1)
    assert causes.base.residual_m < 0.1 * causes.rest_m
