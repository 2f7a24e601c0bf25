"""``python -m fieldtest.natnet serve | record | probe`` (see fieldtest/natnet/cli.py)."""

import sys

from fieldtest.natnet.cli import main

sys.exit(main())
