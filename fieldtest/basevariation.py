"""A twin robot instance: the Create 3's systematic errors drawn from a seed (plain data).

The nominal twin robot has perfect wheels. A drawn instance has the errors a real differential-drive
base carries, as UMBmark names them (Borenstein and Feng, "Measurement and correction of systematic
odometry errors in mobile robots", IEEE Trans. Robotics and Automation 12(6), 1996: unequal wheel
diameters E_d and an uncertain effective wheelbase E_b are the two dominant systematic errors). The
ranges (docs/analysis.md, "The robot's own drift in the twin"):

- wheel diameter ratio E_d = D_right / D_left within 1 +- 0.002: the Create 3 wheel is 72 mm
  (slowrunner/create3ros README.md; create3_docs docs/hw/overview.md: two wheels with encoders)
  with 508.8 ticks per wheel turn (create3_docs docs/api/odometry.md), 0.444 mm per tick, so 0.002
  is a 0.14 mm difference of diameter, below one encoder tick per wheel turn, the size of tyre
  wear or uneven load on a rubber tread.
- wheelbase ratio E_b = actual / nominal within 1 +- 0.01: the kit's model uses 0.233 m
  (create3_sim irobot_create_control control.yaml: wheel_separation), the Create 3 is also given as
  235 mm (slowrunner/create3ros README.md): the two published figures differ by 0.9 %, which is
  where the effective contact line of a tread of finite width can lie.
- turn slip is not drawn: no published figure bounds it for the Create 3 (its fused odometry is not
  published either: iRobotEducation/create3_sim issue 223), and UMBmark counts what is
  systematic of it into E_b, which the range above already spans. ``twin.turn_slip`` is the user's
  to set, beside a ``robot_variation`` or alone.

Values outside these ranges are the user's to set (``twin.wheel_diameter_ratio`` and the others).
"""

from __future__ import annotations

import numpy as np

WHEEL_DIAMETER_RATIO_RANGE = (0.998, 1.002)
WHEELBASE_RATIO_RANGE = (0.99, 1.01)
FIELDS = ("wheel_diameter_ratio", "wheelbase_ratio")  # the drawn errors, each with a published range
NOMINAL = {"wheel_diameter_ratio": 1.0, "wheelbase_ratio": 1.0}


def draw(seed: int) -> dict[str, float]:
    """The robot instance of ``seed``: each error uniform in its range (the same seed, the same robot)."""
    rng = np.random.default_rng([0x43523, int(seed)])  # its own stream, apart from the trial's seed
    return {
        name: round(float(rng.uniform(*bounds)), 6)
        for name, bounds in zip(FIELDS, (WHEEL_DIAMETER_RATIO_RANGE, WHEELBASE_RATIO_RANGE), strict=True)
    }
