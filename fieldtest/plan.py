"""The square plan: the single source of truth for the command schedule, the ideal path and laps.

Every lap is four (side, turn) pairs: drive straight for one side, then turn 90 degrees in place.
Times are seconds from the start of the command stream; motion starts after ``start_delay_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fieldtest.errors import FieldtestError

CREATE3_DEFAULT_MAX_SPEED_MPS = 0.306  # clamp unless motion_control safety_override is "full"
CREATE3_OVERRIDE_MAX_SPEED_MPS = 0.46
CREATE3_WHEEL_ACCEL_MPS2 = 0.9
MAX_COMMAND_RATE_HZ = 100.0
SIDES_PER_LAP = 4
# After the planned end the robot stands still: the drift's closing takes its rest pose from this
# window (seconds after the motion's planned end), and the runners keep recording until it is covered.
REST_AFTER_S = (0.5, 1.0)
# The robot has started once the ground truth is this far from its rest pose and still is this long
# after: the analysis's motion start, and the recorder's own reading of it while it records.
MOTION_START_MIN_M = 0.010
MOTION_START_SUSTAIN_S = 0.2  # so a single glitch is not a start
_TICK_TOLERANCE = 1e-6


class PlanError(FieldtestError, ValueError):
    """A square plan that cannot be driven as asked."""


@dataclass(frozen=True)
class Segment:
    kind: Literal["side", "turn"]
    lap: int  # 0-based
    index: int  # 0..3 within the lap
    start_s: float  # from stream start
    duration_s: float
    linear_mps: float
    angular_rps: float

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Schedule:
    """What to send at each tick: arrays of equal length, tick ``seq`` at ``t_s``."""

    seq: np.ndarray
    t_s: np.ndarray
    linear_mps: np.ndarray
    angular_rps: np.ndarray


class SquarePlan(BaseModel):
    """Drive a square: ``laps`` laps of four sides joined by in-place 90 degree turns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    linear_speed_mps: float = Field(0.33, description="forward speed on each side")
    turn_rate_dps: float = Field(30.0, description="yaw rate during each turn, degrees per second")
    side_duration_s: float | None = Field(None, description="time on each side (default 3 s)")
    side_length_m: float | None = Field(None, description="alternative to side_duration_s")
    laps: int = Field(4, description="number of laps")
    command_rate_hz: float = Field(20.0, description="command stream rate, up to 100 Hz")
    start_delay_s: float = Field(1.0, description="zero commands streamed before motion starts")
    turn_direction: Literal["left", "right"] = Field("left", description="left = counter-clockwise")
    accel_limit_mps2: float = Field(CREATE3_WHEEL_ACCEL_MPS2, description="robot wheel acceleration limit")

    @model_validator(mode="after")
    def _check(self) -> SquarePlan:
        if self.linear_speed_mps <= 0 or self.turn_rate_dps <= 0:
            raise PlanError(
                f"speeds must be positive (linear_speed_mps={self.linear_speed_mps}, "
                f"turn_rate_dps={self.turn_rate_dps})"
            )
        if self.side_duration_s is not None and self.side_length_m is not None:
            raise PlanError("give side_duration_s or side_length_m, not both")
        if self.side_s <= 0:
            raise PlanError(f"side must be positive, got {self.side_s} s")
        if self.laps < 1:
            raise PlanError(f"laps must be at least 1, got {self.laps}")
        if not 0 < self.command_rate_hz <= MAX_COMMAND_RATE_HZ:
            raise PlanError(
                f"command_rate_hz must be in (0, {MAX_COMMAND_RATE_HZ:g}], got {self.command_rate_hz}"
            )
        if self.start_delay_s < 0:
            raise PlanError(f"start_delay_s must not be negative, got {self.start_delay_s}")
        ramp_s = self.linear_speed_mps / self.accel_limit_mps2
        if self.side_s < 2 * ramp_s:
            raise PlanError(
                f"side of {self.side_s:.3f} s is too short: reaching {self.linear_speed_mps} m/s and stopping "
                f"at {self.accel_limit_mps2} m/s^2 takes {2 * ramp_s:.3f} s"
            )
        for name, seconds in (
            ("side", self.side_s),
            ("turn", self.turn_s),
            ("start delay", self.start_delay_s),
        ):
            ticks = seconds * self.command_rate_hz
            if abs(ticks - round(ticks)) > _TICK_TOLERANCE:
                raise PlanError(
                    f"{self.command_rate_hz:g} Hz cannot represent the {name} boundary: "
                    f"{seconds:g} s is {ticks:.4f} ticks, not a whole number"
                )
        return self

    # Derived quantities -------------------------------------------------------------------
    @property
    def side_s(self) -> float:
        if self.side_length_m is not None:
            return self.side_length_m / self.linear_speed_mps
        return 3.0 if self.side_duration_s is None else self.side_duration_s

    @property
    def side_m(self) -> float:
        return self.linear_speed_mps * self.side_s

    @property
    def turn_rps(self) -> float:
        sign = 1.0 if self.turn_direction == "left" else -1.0
        return sign * math.radians(self.turn_rate_dps)

    @property
    def turn_s(self) -> float:
        return 90.0 / self.turn_rate_dps

    @property
    def lap_s(self) -> float:
        return SIDES_PER_LAP * (self.side_s + self.turn_s)

    @property
    def motion_s(self) -> float:
        return self.laps * self.lap_s

    @property
    def total_s(self) -> float:
        """Stream duration: start delay plus motion (the stop burst comes after)."""
        return self.start_delay_s + self.motion_s

    @property
    def tick_s(self) -> float:
        return 1.0 / self.command_rate_hz

    def warnings(self) -> list[str]:
        out = []
        if self.linear_speed_mps > CREATE3_DEFAULT_MAX_SPEED_MPS:
            out.append(
                f"linear speed {self.linear_speed_mps} m/s exceeds the Create 3 default cap of "
                f"{CREATE3_DEFAULT_MAX_SPEED_MPS} m/s: it is clamped unless /motion_control "
                "safety_override is 'full'"
            )
        return out

    # Schedule -----------------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        out = []
        t = self.start_delay_s
        for lap in range(self.laps):
            for i in range(SIDES_PER_LAP):
                out.append(Segment("side", lap, i, t, self.side_s, self.linear_speed_mps, 0.0))
                t += self.side_s
                out.append(Segment("turn", lap, i, t, self.turn_s, 0.0, self.turn_rps))
                t += self.turn_s
        return out

    def n_ticks(self) -> int:
        """Ticks in the stream, from the first zero command to the last motion command."""
        return round(self.total_s * self.command_rate_hz)

    def command_at(self, t_s: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Commanded (linear m/s, angular rad/s) at stream times; zero before and after motion."""
        t = np.atleast_1d(np.asarray(t_s, dtype=float))
        phase = t - self.start_delay_s
        moving = (phase >= -_TICK_TOLERANCE) & (phase < self.motion_s - _TICK_TOLERANCE)
        in_pair = np.mod(np.clip(phase, 0.0, None) + _TICK_TOLERANCE, self.side_s + self.turn_s)
        on_side = in_pair < self.side_s
        linear = np.where(moving & on_side, self.linear_speed_mps, 0.0)
        angular = np.where(moving & ~on_side, self.turn_rps, 0.0)
        return linear, angular

    def schedule(self) -> Schedule:
        seq = np.arange(self.n_ticks(), dtype=np.int64)
        t = seq / self.command_rate_hz
        linear, angular = self.command_at(t)
        return Schedule(seq, t, linear, angular)

    # Ideal path ---------------------------------------------------------------------------
    def segment_start_poses(self, side_scale: float = 1.0, turn_scale: float = 1.0) -> np.ndarray:
        """Ideal (x, y, yaw) at the start of each segment and at the end: shape (n_segments + 1, 3).

        ``side_scale`` and ``turn_scale``: the path of a robot whose sides come out that many times as
        long and whose turns that many times as large (a systematic odometry error; tests use it)."""
        poses = [(0.0, 0.0, 0.0)]
        side = self.side_m * side_scale
        for seg in self.segments():
            x, y, yaw = poses[-1]
            if seg.kind == "side":
                poses.append((x + side * math.cos(yaw), y + side * math.sin(yaw), yaw))
            else:
                poses.append((x, y, yaw + seg.angular_rps * seg.duration_s * turn_scale))
        return np.array(poses)

    def ideal_pose(
        self, t_s: np.ndarray | float, side_scale: float = 1.0, turn_scale: float = 1.0
    ) -> np.ndarray:
        """Ideal (x, y, yaw) at stream times, velocity changes taken as instantaneous: shape (n, 3).
        ``side_scale``, ``turn_scale``: as for ``segment_start_poses``."""
        t = np.atleast_1d(np.asarray(t_s, dtype=float))
        segs = self.segments()
        starts = np.array([s.start_s for s in segs])
        poses = self.segment_start_poses(side_scale, turn_scale)
        idx = np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(segs) - 1)
        dt = np.clip(t - starts[idx], 0.0, np.array([s.duration_s for s in segs])[idx])
        before = t < self.start_delay_s
        dt = np.where(before, 0.0, dt)
        base = poses[idx]
        lin = np.array([s.linear_mps for s in segs])[idx] * side_scale
        ang = np.array([s.angular_rps for s in segs])[idx] * turn_scale
        x = base[:, 0] + lin * dt * np.cos(base[:, 2])
        y = base[:, 1] + lin * dt * np.sin(base[:, 2])
        yaw = base[:, 2] + ang * dt
        return np.column_stack([x, y, yaw])

    def lap_start_s(self, lap: int) -> float:
        """Stream time at which lap ``lap`` (0-based) starts."""
        return self.start_delay_s + lap * self.lap_s

    def corner_times_s(self, lap: int) -> np.ndarray:
        """Stream times of the lap's four corners: the ends of its sides, where each turn starts."""
        return np.array([s.end_s for s in self.segments() if s.kind == "side" and s.lap == lap])


def validation_message(exc: ValidationError) -> str:
    """The first problem of a pydantic error as one line: 'field: reason'."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    reason = first["msg"].removeprefix("Value error, ")
    return f"{where}: {reason}" if where else reason


def plan_from_mapping(values: dict, source: str) -> SquarePlan:
    """Build a plan from YAML/JSON data; errors name ``source`` and fit on one line."""
    try:
        return SquarePlan.model_validate(values)
    except ValidationError as exc:
        raise PlanError(f"{source}: {validation_message(exc)}") from None
