"""A Create 3 base as the twin robot drives it: pure model, no I/O, no clock of its own.

Differential drive with the Create 3's published limits (iRobot create3_sim, irobot_create_control
config/control.yaml and the Create 3 docs): wheel separation 0.233 m, wheel acceleration limit
0.9 m/s^2, linear speed capped at 0.306 m/s unless ``safety_override`` is ``full`` (0.46 m/s),
angular speed capped at 1.9 rad/s, and the command watchdog (``wheels_stop_threshold_sec``, 0.5 s):
with no command for that long the wheels' target becomes zero and they decelerate at the limit.

The model is event-exact: ``set_command(v, w, t)`` first advances to ``t`` and then changes the
wheel targets, and ``advance_to`` splits time at every ramp end, watchdog expiry and slip interval,
integrating each piece with Simpson's rule (wheel speeds are linear in time within a piece). So
the path depends only on when commands arrive, not on how often the caller steps the model.

A command can reach ``set_command`` after the caller has already stepped the model past its arrival
time (its middleware callback ran late). The caller marks each step with ``checkpoint()``; the model
keeps the checkpoints of the last ``REPLAY_WINDOW_S``. Such a command is then replayed from the
latest checkpoint before its time with every command since, so it still takes effect at its own
time (``late_replays`` counts them). Only one older than the window applies late, at the model's
current time (``late_applied``).

Imperfections (off by default): a relative wheel-speed error common to both wheels, a constant
yaw-rate bias while the wheels turn, per-wheel random slip redrawn every ``slip_interval_s`` of
model time from a generator seeded with ``seed`` (reproducible for the same command times), and the
base's systematic errors as UMBmark names them (Borenstein and Feng 1996): unequal wheel diameters
``wheel_diameter_ratio`` E_d = D_right / D_left (mean diameter kept), a wheelbase ``wheelbase_ratio``
E_b = actual / nominal (the base computes wheel targets with the nominal one), and ``turn_slip``,
the fraction of the yaw rate lost to skidding while turning. Ranges: fieldtest.basevariation.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fieldtest.plan import (
    CREATE3_DEFAULT_MAX_SPEED_MPS,
    CREATE3_OVERRIDE_MAX_SPEED_MPS,
    CREATE3_WHEEL_ACCEL_MPS2,
)

WHEEL_SEPARATION_M = 0.233  # create3_sim irobot_create_control: wheel_separation
MAX_ANGULAR_RPS = 1.9
MAX_WHEEL_SPEED_MPS = CREATE3_OVERRIDE_MAX_SPEED_MPS  # hardware limit of either wheel
# The base stops after this long without a cmd_vel. create3_docs docs/api/motion.md names the
# parameter (motion_control wheels_stop_threshold_sec) but gives no default; 0.5 s is the kit's
# assumption, to be checked on the lab's robot (ros2 param get /motion_control wheels_stop_threshold_sec).
WATCHDOG_S = 0.5
MAX_SUBSTEP_S = 0.005  # integrate at 200 Hz or finer
# How late a command's callback may run and still act at its own time: as long as the watchdog, the
# longest a base waits on a command; a stalled machine holds callbacks for tens of milliseconds.
REPLAY_WINDOW_S = WATCHDOG_S
_EPS_S = 1e-12

SafetyOverride = Literal["none", "backup_only", "full"]
# What a checkpoint keeps (with the watchdog trips and, under slip, the random generator's state).
_STATE_FIELDS = (
    "t", "x", "y", "yaw", "left", "right", "target_left", "target_right", "last_command_t",
    "commands_applied", "late_replays", "_slip_index", "_slip_left", "_slip_right",
)  # fmt: skip


def max_linear_speed(safety_override: SafetyOverride) -> float:
    """Create 3 linear speed cap for a /motion_control ``safety_override`` value."""
    if safety_override == "full":
        return CREATE3_OVERRIDE_MAX_SPEED_MPS
    if safety_override in ("none", "backup_only"):
        return CREATE3_DEFAULT_MAX_SPEED_MPS
    raise ValueError(f"unknown safety_override {safety_override!r} (none, backup_only, full)")


@dataclass(frozen=True)
class Imperfections:
    wheel_speed_error: float = 0.0  # relative, both wheels: 0.01 drives 1 % too fast
    heading_bias_dps: float = 0.0  # added yaw rate while any wheel turns
    slip: float = 0.0  # std of the relative speed loss of each wheel, redrawn per slip interval
    seed: int = 0
    slip_interval_s: float = 0.01
    wheel_diameter_ratio: float = 1.0  # E_d = D_right / D_left; a side curves left when > 1
    wheelbase_ratio: float = 1.0  # E_b = actual / nominal wheel separation; turns short when > 1
    turn_slip: float = 0.0  # fraction of the yaw rate lost while turning (skid)

    @property
    def any(self) -> bool:
        return bool(
            self.wheel_speed_error
            or self.heading_bias_dps
            or self.slip
            or self.turn_slip
            or self.wheel_diameter_ratio != 1.0
            or self.wheelbase_ratio != 1.0
        )

    @property
    def wheel_gains(self) -> tuple[float, float]:
        """(left, right) distance per commanded distance from the diameters alone (Borenstein and
        Feng's c_L = 2 / (E_d + 1), c_R = 2 E_d / (E_d + 1): the mean diameter is kept)."""
        e_d = self.wheel_diameter_ratio
        return 2.0 / (e_d + 1.0), 2.0 * e_d / (e_d + 1.0)


def _toward(current: float, target: float, max_change: float) -> float:
    """Move ``current`` toward ``target`` by at most ``max_change``; land exactly on the target."""
    diff = target - current
    if abs(diff) <= max_change * (1.0 + 1e-9) + 1e-15:
        return target
    return current + math.copysign(max_change, diff)


class Create3Model:
    """State of one Create 3: pose (x, y, yaw) in the world, wheel speeds, targets, watchdog."""

    def __init__(
        self,
        safety_override: SafetyOverride = "full",
        imperfections: Imperfections | None = None,
        *,
        t0: float = 0.0,
        wheel_separation_m: float = WHEEL_SEPARATION_M,
        accel_limit_mps2: float = CREATE3_WHEEL_ACCEL_MPS2,
        watchdog_s: float = WATCHDOG_S,
        max_substep_s: float = MAX_SUBSTEP_S,
    ):
        self.max_speed_mps = max_linear_speed(safety_override)
        self.imperfections = imperfections or Imperfections()
        self.wheel_separation_m = wheel_separation_m
        self.accel_limit_mps2 = accel_limit_mps2
        self.watchdog_s = watchdog_s
        self.max_substep_s = max_substep_s
        self.t = t0
        self.x = self.y = self.yaw = 0.0
        self.left = self.right = 0.0  # wheel speeds the motors hold (before imperfections)
        self.target_left = self.target_right = 0.0
        self.last_command_t: float | None = None
        self.watchdog_trips: list[float] = []  # model times at which the watchdog stopped the robot
        self.commands_applied = 0
        self._rng = np.random.default_rng(self.imperfections.seed)
        self._t0 = t0
        self._slip_index = -1
        self._slip_left = self._slip_right = 1.0
        self.late_replays = 0  # commands replayed from the checkpoint to apply at their own time
        self.late_applied = 0  # commands older than the checkpoint, applied at the model's time
        # (state, number of commands logged when it was taken), oldest first, over REPLAY_WINDOW_S
        self._checkpoints: collections.deque[tuple[dict, int]] = collections.deque()
        self._log: list[tuple[float, float, float]] = []  # (t, linear, angular) since the oldest checkpoint

    # Commands -----------------------------------------------------------------------------
    def clamp(self, linear: float, angular: float) -> tuple[float, float]:
        """The velocity the base actually targets for a command (speed caps, wheel limit)."""
        v = max(-self.max_speed_mps, min(self.max_speed_mps, linear))
        w = max(-MAX_ANGULAR_RPS, min(MAX_ANGULAR_RPS, angular))
        half = w * self.wheel_separation_m / 2.0
        biggest = max(abs(v - half), abs(v + half))
        if biggest > MAX_WHEEL_SPEED_MPS:  # scale both wheels: keeps the turning radius
            scale = MAX_WHEEL_SPEED_MPS / biggest
            v, w = v * scale, w * scale
        return v, w

    def set_command(self, linear: float, angular: float, t: float) -> tuple[float, float]:
        """Apply a velocity command that arrived at model time ``t``; returns the clamped target."""
        if not (math.isfinite(linear) and math.isfinite(angular)):
            return self.target_velocity()  # the base ignores NaN/inf commands
        if t < self.t - _EPS_S:
            latest = self._latest_checkpoint_before(t)
            if latest is not None:
                return self._replay_with(linear, angular, t, latest)
            self.late_applied += 1
        self._log.append((t, linear, angular))
        return self._apply(linear, angular, t)

    def _apply(self, linear: float, angular: float, t: float) -> tuple[float, float]:
        self.advance_to(t)
        v, w = self.clamp(linear, angular)
        half = w * self.wheel_separation_m / 2.0
        self.target_left, self.target_right = v - half, v + half
        self.last_command_t = max(t, self.t)
        self.commands_applied += 1
        return v, w

    def checkpoint(self) -> None:
        """Remember the state now, so that a command arriving late for a time after this one can
        still be applied at its own time (``set_command``). Call it before each step."""
        self._checkpoints.append((self._state(), len(self._log)))
        while len(self._checkpoints) > 1 and self._checkpoints[1][0]["t"] <= self.t - REPLAY_WINDOW_S:
            self._checkpoints.popleft()
        dropped = self._checkpoints[0][1]
        if dropped:  # commands before the oldest checkpoint can no longer be replayed
            del self._log[:dropped]
            self._checkpoints = collections.deque((state, n - dropped) for state, n in self._checkpoints)

    def _latest_checkpoint_before(self, t: float) -> int | None:
        """Index of the newest checkpoint taken at or before model time ``t``, None if none is."""
        for index in range(len(self._checkpoints) - 1, -1, -1):
            if self._checkpoints[index][0]["t"] <= t:
                return index
        return None

    def _state(self) -> dict:
        state = {name: getattr(self, name) for name in _STATE_FIELDS}
        state["watchdog_trips"] = list(self.watchdog_trips)
        if self.imperfections.slip:  # the slip draws must repeat on a replay
            state["rng"] = self._rng.bit_generator.state
        return state

    def _restore(self, state: dict) -> None:
        for name in _STATE_FIELDS:
            setattr(self, name, state[name])
        self.watchdog_trips = list(state["watchdog_trips"])
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]

    def _replay_with(self, linear: float, angular: float, t: float, index: int) -> tuple[float, float]:
        """Go back to checkpoint ``index``, apply every command since in time order with this one,
        and advance to where the model was. Later checkpoints knew nothing of it: dropped."""
        state, logged = self._checkpoints[index]
        now, replays, late = self.t, self.late_replays + 1, self.late_applied
        commands = sorted([*self._log[logged:], (t, linear, angular)], key=lambda c: c[0])
        self._restore(state)
        while len(self._checkpoints) > index + 1:
            self._checkpoints.pop()
        self.late_applied = late
        result = self.target_velocity()
        for when, v, w in commands:
            applied = self._apply(v, w, when)
            if (when, v, w) == (t, linear, angular):
                result = applied
        self.advance_to(now)
        self.late_replays = replays
        self._log[logged:] = commands
        return result

    def target_velocity(self) -> tuple[float, float]:
        return self._body(self.target_left, self.target_right)

    # State --------------------------------------------------------------------------------
    @property
    def pose(self) -> tuple[float, float, float]:
        return self.x, self.y, self.yaw

    def velocity(self) -> tuple[float, float]:
        """True body (linear m/s, angular rad/s) now, imperfections included."""
        v, w = self._true_body(*self._effective(self.left, self.right))
        return v, w + self._bias(self.left, self.right, self.left, self.right)

    @property
    def stopped(self) -> bool:
        return self.left == 0.0 and self.right == 0.0

    @property
    def watchdog_expired(self) -> bool:
        return self.last_command_t is None or self.t >= self.last_command_t + self.watchdog_s

    # Integration --------------------------------------------------------------------------
    def step(self, dt: float) -> None:
        self.advance_to(self.t + dt)

    def advance_to(self, t_end: float) -> None:
        """Integrate the motion up to model time ``t_end`` (earlier times are ignored)."""
        while t_end - self.t > _EPS_S:
            self._check_watchdog()
            self._update_slip()
            piece_end = min(t_end, self._next_event())
            self._integrate(piece_end - self.t)
            self.t = piece_end
        self._check_watchdog()

    def _check_watchdog(self) -> None:
        if self.last_command_t is None:
            return
        if self.t >= self.last_command_t + self.watchdog_s - _EPS_S and (
            self.target_left or self.target_right
        ):
            self.target_left = self.target_right = 0.0
            self.watchdog_trips.append(self.t)

    def _next_event(self) -> float:
        events = [self.t + self.max_substep_s]
        if self.last_command_t is not None and (self.target_left or self.target_right):
            events.append(self.last_command_t + self.watchdog_s)
        for speed, target in ((self.left, self.target_left), (self.right, self.target_right)):
            if speed != target:
                events.append(self.t + abs(target - speed) / self.accel_limit_mps2)
        if self.imperfections.slip:
            events.append(self._t0 + (self._slip_index + 1) * self.imperfections.slip_interval_s)
        return max(min(events), self.t + _EPS_S)

    def _update_slip(self) -> None:
        imp = self.imperfections
        if not imp.slip:
            return
        index = math.floor((self.t - self._t0) / imp.slip_interval_s + 1e-9)
        while self._slip_index < index:  # one draw per interval, in order: reproducible by seed
            draws = self._rng.normal(0.0, imp.slip, size=2)
            self._slip_left, self._slip_right = 1.0 - abs(draws[0]), 1.0 - abs(draws[1])
            self._slip_index += 1

    def _effective(self, left: float, right: float) -> tuple[float, float]:
        gain = 1.0 + self.imperfections.wheel_speed_error
        gain_left, gain_right = self.imperfections.wheel_gains
        return left * gain * gain_left * self._slip_left, right * gain * gain_right * self._slip_right

    def _body(self, left: float, right: float) -> tuple[float, float]:
        """Body velocity as the base computes it (nominal wheel separation)."""
        return (left + right) / 2.0, (right - left) / self.wheel_separation_m

    def _true_body(self, left: float, right: float) -> tuple[float, float]:
        """Body velocity the wheels really give: the actual wheel separation, the turn's skid."""
        imp = self.imperfections
        turn = (right - left) / (self.wheel_separation_m * imp.wheelbase_ratio)
        return (left + right) / 2.0, turn * (1.0 - imp.turn_slip)

    def _bias(self, *wheels: float) -> float:
        if not self.imperfections.heading_bias_dps or not any(wheels):
            return 0.0
        return math.radians(self.imperfections.heading_bias_dps)

    def _integrate(self, dt: float) -> None:
        """Advance one piece in which each wheel ramps linearly (or holds)."""
        step = self.accel_limit_mps2 * dt
        left1 = _toward(self.left, self.target_left, step)
        right1 = _toward(self.right, self.target_right, step)
        v0, w0 = self._true_body(*self._effective(self.left, self.right))
        v1, w1 = self._true_body(*self._effective(left1, right1))
        bias = self._bias(self.left, self.right, left1, right1)
        w0, w1 = w0 + bias, w1 + bias
        # yaw is quadratic in time within the piece; position by Simpson's rule on v*cos(yaw)
        yaw_mid = self.yaw + dt * (3.0 * w0 + w1) / 8.0
        yaw_end = self.yaw + dt * (w0 + w1) / 2.0
        v_mid = (v0 + v1) / 2.0
        self.x += (
            dt / 6.0 * (v0 * math.cos(self.yaw) + 4.0 * v_mid * math.cos(yaw_mid) + v1 * math.cos(yaw_end))
        )
        self.y += (
            dt / 6.0 * (v0 * math.sin(self.yaw) + 4.0 * v_mid * math.sin(yaw_mid) + v1 * math.sin(yaw_end))
        )
        self.yaw = yaw_end
        self.left, self.right = left1, right1


def drive(
    model: Create3Model,
    arrival_s: np.ndarray,
    linear: np.ndarray,
    angular: np.ndarray,
    sample_s: np.ndarray,
) -> np.ndarray:
    """Apply commands at their arrival times and return (x, y, yaw) at each sample time (sorted)."""
    events = sorted(
        [(float(t), 0, i) for i, t in enumerate(arrival_s)]
        + [(float(t), 1, j) for j, t in enumerate(sample_s)]
    )
    out = np.zeros((len(sample_s), 3))
    for t, kind, index in events:  # at equal times a command applies before the sample
        if kind == 0:
            model.set_command(float(linear[index]), float(angular[index]), t)
        else:
            model.advance_to(t)
            out[index] = model.pose
    return out
