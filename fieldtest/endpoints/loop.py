"""The robot end's periodic loop, and how late it ran: a stalled loop is the robot's own timing fault."""

from __future__ import annotations

import threading
from collections.abc import Callable

from .clock import Clock


class PeriodicLoop:
    """Calls ``step(tick)`` every ``1 / hz`` s on ``clock`` until stopped. ``step_late_ms`` holds how
    late each step woke (docs/analysis.md, "Stack faults and the machine"); a loop that fell behind
    skips the steps it missed (``steps_skipped``) instead of running them back to back."""

    def __init__(self, clock: Clock, hz: float):
        self.clock = clock
        self.period_ns = round(1e9 / hz)
        self.step_late_ms: list[float] = []
        self.steps_skipped = 0

    def run(
        self, step: Callable[[int], None], stop: threading.Event, max_runtime_s: float | None = None
    ) -> None:
        deadline = self.clock.now_ns() + round(max_runtime_s * 1e9) if max_runtime_s else None
        tick = 0
        next_ns = self.clock.now_ns()
        while not stop.is_set():
            step(tick)
            tick += 1
            next_ns += self.period_ns
            now = self.clock.now_ns()
            if next_ns < now:  # fell behind (loaded machine): skip the steps it missed
                self.step_late_ms.append((now - next_ns) / 1e6)  # the step due then ran this late, or never
                self.steps_skipped += (now - next_ns) // self.period_ns + 1
                next_ns = now + self.period_ns
            if deadline is not None and now >= deadline:
                break
            self.clock.sleep_until(next_ns, stop, spin_ns=0)
            self.step_late_ms.append(max(0, self.clock.now_ns() - next_ns) / 1e6)
