"""Process ids for the tests of what killed processes leave behind."""

from __future__ import annotations

import subprocess
import sys


def gone_pid() -> int:
    """The pid of a process that has exited and been reaped (pids are not reused at once)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    return int(child.stdout)
