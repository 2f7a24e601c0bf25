"""The Create 3's systematic errors in the twin (wheel diameters, wheelbase, slip in turns) and the
robot instances drawn from a seed.

- A wheel-diameter ratio E_d makes a straight command curve: heading rate 2 v (E_d - 1) / ((E_d + 1) b),
  swept over both signs, sizes and speeds; the mean speed stays v.
- A wheelbase ratio E_b turns every in-place turn 1 / E_b as far; turn slip loses its fraction.
- ``twin.robot_variation`` draws the instance from its seed, records the values, refuses others.
"""

import math

import numpy as np
import pytest

from fieldtest import basevariation
from fieldtest.record import TrialRequest
from fieldtest.record.trial import TwinSettings
from fieldtest.twin.create3model import WHEEL_SEPARATION_M, Create3Model, Imperfections, drive
from fieldtest.twin.robot import model_for

B = WHEEL_SEPARATION_M


def _straight(imperfections: Imperfections, v: float, seconds: float) -> Create3Model:
    model = Create3Model("full", imperfections)
    for k in range(int((1.0 + seconds) * 10) + 1):  # commands at 10 Hz keep the watchdog fed
        model.set_command(v, 0.0, k / 10)
        if k == 10:  # a second in: past the ramp, measured from here
            model.x = model.y = model.yaw = 0.0
    model.advance_to(1.0 + seconds)
    return model


@pytest.mark.parametrize("e_d", [0.99, 0.998, 1.002, 1.01])
@pytest.mark.parametrize("v", [0.1, 0.306])
def test_a_wheel_diameter_ratio_curves_a_straight_command_as_the_kinematics_say(e_d, v):
    model = _straight(Imperfections(wheel_diameter_ratio=e_d), v, 3.0)
    rate = (e_d - 1) / (e_d + 1) * 2 * v / B  # rad/s; > 0: curving left, the right wheel larger
    assert model.yaw == pytest.approx(rate * 3.0, rel=1e-9)
    speed, turn = model.velocity()
    assert speed == pytest.approx(v, rel=1e-12)  # the mean diameter is kept
    assert turn == pytest.approx(rate, rel=1e-9)
    radius = v / rate
    chord = 2 * abs(radius) * math.sin(abs(rate) * 3.0 / 2)
    assert math.hypot(model.x, model.y) == pytest.approx(chord, rel=1e-9)


def _turn(imperfections: Imperfections, w: float, seconds: float) -> float:
    t = np.arange(0, seconds, 0.05)
    poses = drive(
        Create3Model("full", imperfections), t, np.zeros(len(t)), np.full(len(t), w), np.array([seconds + 2])
    )
    nominal = drive(Create3Model("full"), t, np.zeros(len(t)), np.full(len(t), w), np.array([seconds + 2]))
    return poses[0, 2] / nominal[0, 2]


@pytest.mark.parametrize("e_b", [0.98, 0.995, 1.01])
@pytest.mark.parametrize("w", [0.5, -1.2])
def test_a_wheelbase_error_scales_every_turn(e_b, w):
    assert _turn(Imperfections(wheelbase_ratio=e_b), w, 2.0) == pytest.approx(1 / e_b, rel=1e-9)


@pytest.mark.parametrize("slip", [0.005, 0.02])
def test_turn_slip_loses_its_fraction_of_the_turn(slip):
    assert _turn(Imperfections(turn_slip=slip), 0.52, 3.0) == pytest.approx(1 - slip, rel=1e-9)


def test_nominal_errors_leave_the_model_as_it_was():
    t = np.arange(0, 6, 0.05)
    v, w = np.where(t < 3, 0.3, 0.0), np.where(t < 3, 0.0, 0.5)
    end = np.array([8.0])
    nominal = drive(Create3Model("full"), t, v, w, end)
    explicit = drive(
        Create3Model("full", Imperfections(wheel_diameter_ratio=1.0, wheelbase_ratio=1.0)), t, v, w, end
    )
    assert np.array_equal(nominal, explicit)


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
def test_a_robot_variation_draws_its_instance_within_the_ranges_and_records_it(seed):
    twin = TwinSettings(robot_variation=seed)
    drawn = basevariation.draw(seed)
    assert {k: getattr(twin, k) for k in basevariation.FIELDS} == drawn
    lo, hi = basevariation.WHEEL_DIAMETER_RATIO_RANGE
    assert lo <= twin.wheel_diameter_ratio <= hi
    lo, hi = basevariation.WHEELBASE_RATIO_RANGE
    assert lo <= twin.wheelbase_ratio <= hi
    assert twin.has_imperfections()
    again = TwinSettings.model_validate(twin.model_dump())  # as trial.yaml is read back
    assert again == twin
    model = model_for(TrialRequest(twin=twin))
    imp = model.imperfections
    assert (imp.wheel_diameter_ratio, imp.wheelbase_ratio) == tuple(drawn.values())
    assert imp.turn_slip == 0.0  # no published range: never drawn


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
@pytest.mark.parametrize("turn_slip", [0.0, 0.005, 0.03])
def test_turn_slip_is_the_users_own_beside_a_robot_variation(seed, turn_slip):
    """Only errors with a published range are drawn; a set turn slip stays as set."""
    twin = TwinSettings(robot_variation=seed, turn_slip=turn_slip)
    assert twin.turn_slip == turn_slip
    assert model_for(TrialRequest(twin=twin)).imperfections.turn_slip == turn_slip
    assert set(basevariation.draw(seed)) == {"wheel_diameter_ratio", "wheelbase_ratio"}


def test_robot_variations_differ_and_nominal_is_the_default():
    assert len({tuple(basevariation.draw(s).values()) for s in range(20)}) == 20
    assert not TwinSettings().has_imperfections()
    assert model_for(TrialRequest()).imperfections.any is False


def test_a_value_beside_a_robot_variation_that_is_not_its_draw_is_refused():
    with pytest.raises(ValueError, match="twin.wheelbase_ratio 1.05 differs from twin.robot_variation 3"):
        TwinSettings(robot_variation=3, wheelbase_ratio=1.05)
