"""The geofence: a box on the floor, in Motive's world frame, that the robot's rigid body must stay in.

While a trial streams, the lab runner reads the live mocap position (the kit's NatNet recorder,
converted to the world frame the analysis uses: x, y on the floor, Z up) and stops the trial
(host stop burst, then the rest of the stop path) the moment the rigid body is outside the box
(campaign ``lab.geofence_m``: [x_min, x_max, y_min, y_max]) or has not been tracked for
``MAX_UNTRACKED_S``.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_UNTRACKED_S = 1.0  # a lost rigid body cannot be fenced: stop


@dataclass(frozen=True)
class Geofence:
    x_min: float
    x_max: float
    y_min: float
    y_max: float

    @classmethod
    def from_settings(cls, box: list[float] | None) -> Geofence | None:
        return cls(*box) if box else None

    def outside(self, x: float, y: float) -> str:
        """Why (x, y) is outside the box, '' when inside."""
        if self.x_min <= x <= self.x_max and self.y_min <= y <= self.y_max:
            return ""
        return (
            f"the rigid body at x {x:+.2f} m, y {y:+.2f} m left the geofence "
            f"(x {self.x_min:+.2f}..{self.x_max:+.2f} m, y {self.y_min:+.2f}..{self.y_max:+.2f} m)"
        )
