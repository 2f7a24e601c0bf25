"""The userspace link emulator: builds linkfwd.c once with gcc and drives one process per link.

The kernel here has no netem, so an emulated link is two TAP devices (one in the node's network
namespace, one in the switch namespace) joined by ``linkfwd``, which delays, drops and paces the
frames it copies across. Python talks to it over stdin/stdout; when Python goes away its stdin
closes and it exits, so a killed trial never leaves a forwarder behind.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import IO

from fieldtest.cbuild import BuildError, build_c
from fieldtest.errors import FieldtestError
from fieldtest.netem.profiles import Direction, LinkProfile

SOURCE = Path(__file__).with_name("linkfwd.c")


class ForwarderError(FieldtestError, RuntimeError):
    """The forwarder could not be built, did not start, or refused a command."""


def build_forwarder() -> Path:
    """Compile linkfwd.c unless the binary for this exact source already exists."""
    try:
        return build_c(SOURCE, libs=("m",))
    except BuildError as exc:
        raise ForwarderError(f"the userspace link emulator cannot be built: {exc}") from None


def direction_command(direction_name: str, d: Direction, profile: LinkProfile) -> str:
    """The ``set`` line that configures one direction of linkfwd from a profile direction."""
    ge = d.burst
    values = {
        "delay_ns": round(d.delay_ms * 1e6),
        "jitter_ns": round(d.jitter_ms * 1e6),
        "tau_ns": round(d.jitter_interval() * 1e6),
        "loss": d.loss_pct / 100.0,
        "ge_p": ge.p_pct / 100.0 if ge else 0.0,
        "ge_r": ge.r_pct / 100.0 if ge else 1.0,
        "ge_bad": ge.loss_bad_pct / 100.0 if ge else 0.0,
        "ge_good": ge.loss_good_pct / 100.0 if ge else 0.0,
        "rate_bps": round(d.rate_kbit * 1000) if d.rate_kbit else 0,
        "limit": d.queue_packets,
        "multicast": int(profile.multicast),
        "reorder": int(profile.reorder),
    }
    return f"set {direction_name} " + " ".join(f"{k}={v:.9g}" for k, v in values.items())


class LinkForwarder:
    """One running linkfwd between tap ``tap_a`` in ``netns_a`` and ``tap_b`` in ``netns_b``.

    Direction a2b is the node's uplink (node -> switch), b2a its downlink.
    """

    def __init__(self, netns_a: str, tap_a: str, netns_b: str, tap_b: str, seed: int | None = None):
        argv = [str(build_forwarder()), netns_a, tap_a, netns_b, tap_b]
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        self._stdin, self._stdout, stderr = link_pipes(self.proc)
        first = self._stdout.readline().strip()
        self.realtime = first == "ready rt"
        if first not in ("ready", "ready rt"):
            err = stderr.read().strip() if self.proc.poll() is not None else first
            self.stop()
            raise ForwarderError(f"linkfwd did not start: {err or 'no output'}")
        if seed is not None:
            self._command(f"seed {int(seed)}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _command(self, line: str) -> str:
        with self._lock:
            if self.proc.poll() is not None:
                raise ForwarderError(f"linkfwd exited with code {self.proc.returncode}")
            self._stdin.write(line + "\n")
            self._stdin.flush()
            reply = self._stdout.readline().strip()
        if not reply or reply.startswith("error"):
            raise ForwarderError(f"linkfwd refused {line!r}: {reply or 'no reply'}")
        return reply

    def apply(self, profile: LinkProfile) -> None:
        self._command(direction_command("a2b", profile.up, profile))
        self._command(direction_command("b2a", profile.down, profile))

    def set_link(self, up: bool) -> None:
        self._command("link on" if up else "link off")

    def stats(self) -> dict:
        return json.loads(self._command("stats"))

    def reset_stats(self) -> None:
        self._command("reset")

    def stop(self, timeout_s: float = 2.0) -> None:
        end_by_stdin(self.proc, timeout_s)


def link_pipes(proc: subprocess.Popen[str]) -> tuple[IO[str], IO[str], IO[str]]:
    """stdin, stdout and stderr of a link program started with all three piped."""
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:
        raise ValueError("the link program was started without stdin, stdout and stderr piped")
    return proc.stdin, proc.stdout, proc.stderr


def end_by_stdin(proc: subprocess.Popen, timeout_s: float) -> None:
    """Close a link program's stdin (it exits on end of input), kill it if it does not, close its pipes."""
    if proc.poll() is None:
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except OSError:
                pass


if __name__ == "__main__":  # build ahead of the first trial (tools/install.sh does the same)
    print(build_forwarder())
