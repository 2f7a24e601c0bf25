import math

import numpy as np
import pytest

from fieldtest.plan import PlanError, SquarePlan, plan_from_mapping


def test_default_plan_matches_the_seed_study():
    plan = SquarePlan()
    assert plan.turn_s == pytest.approx(3.0)
    assert plan.side_s == pytest.approx(3.0)
    assert plan.side_m == pytest.approx(0.99)
    assert plan.lap_s == pytest.approx(24.0)
    assert plan.motion_s == pytest.approx(96.0)
    assert len(plan.segments()) == 32


def test_schedule_segment_boundaries_are_exact():
    plan = SquarePlan(start_delay_s=1.0, command_rate_hz=20)
    sched = plan.schedule()
    assert len(sched.seq) == round(97.0 * 20)
    assert np.all(sched.linear_mps[sched.t_s < 1.0] == 0)
    first_side = (sched.t_s >= 1.0) & (sched.t_s < 4.0 - 1e-9)
    assert np.all(sched.linear_mps[first_side] == pytest.approx(0.33))
    assert np.all(sched.angular_rps[first_side] == 0)
    first_turn = (sched.t_s >= 4.0 - 1e-9) & (sched.t_s < 7.0 - 1e-9)
    assert np.all(sched.angular_rps[first_turn] == pytest.approx(math.radians(30)))
    assert np.count_nonzero(first_turn) == 60


def test_ideal_path_is_a_closed_square():
    plan = SquarePlan()
    corners = plan.ideal_pose(plan.corner_times_s(0))
    assert corners[:, :2] == pytest.approx(np.array([[0.99, 0], [0.99, 0.99], [0, 0.99], [0, 0]]), abs=1e-9)
    end = plan.ideal_pose(plan.total_s)[0]
    assert end[:2] == pytest.approx([0.0, 0.0], abs=1e-9)
    assert end[2] == pytest.approx(4 * 2 * math.pi, abs=1e-9)
    mid_side = plan.ideal_pose(plan.start_delay_s + 1.5)[0]
    assert mid_side == pytest.approx([0.495, 0.0, 0.0])


def test_right_turns_mirror_the_square():
    corners = SquarePlan(turn_direction="right").ideal_pose(SquarePlan().corner_times_s(0))
    assert corners[1, :2] == pytest.approx([0.99, -0.99])


def test_side_length_sets_duration():
    plan = SquarePlan(side_length_m=1.0, linear_speed_mps=0.25)
    assert plan.side_s == pytest.approx(4.0)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"linear_speed_mps": 0.0}, "positive"),
        ({"turn_rate_dps": -5}, "positive"),
        ({"side_duration_s": 0.5}, "too short"),
        ({"command_rate_hz": 7.5}, "cannot represent"),
        ({"command_rate_hz": 200}, "command_rate_hz"),
        ({"laps": 0}, "laps"),
        ({"side_duration_s": 3, "side_length_m": 1}, "not both"),
    ],
)
def test_invalid_plans_are_rejected_with_a_reason(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):  # pydantic wraps PlanError in a ValidationError
        SquarePlan(**kwargs)


def test_plan_from_mapping_gives_one_line_error_naming_the_source():
    with pytest.raises(PlanError, match=r"^plan.yaml: .*cannot represent") as err:
        plan_from_mapping({"command_rate_hz": 7.5}, "plan.yaml")
    assert "\n" not in str(err.value)
    with pytest.raises(PlanError, match=r"^plan.yaml: lapz: Extra inputs"):
        plan_from_mapping({"lapz": 3}, "plan.yaml")


def test_speed_above_create3_cap_warns():
    assert any("0.306" in w for w in SquarePlan().warnings())
    assert SquarePlan(linear_speed_mps=0.3, side_duration_s=3.3).warnings() == []
