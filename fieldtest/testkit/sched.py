"""What the kit's tests expect of real-time scheduling on this machine."""

from __future__ import annotations

import os
import subprocess
import sys

from fieldtest.realtime import REALTIME_ENV


def realtime_permitted() -> bool:
    """Whether a child of this process may take SCHED_FIFO (root or CAP_SYS_NICE), asked of a real
    child with the kit's own ``try_realtime``; False if the kit's switch turns it off."""
    if os.environ.get(REALTIME_ENV, "1") == "0":
        return False
    child = "from fieldtest.realtime import try_realtime; print(try_realtime())"
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=False)
    return done.stdout.strip() == "True"
