"""A command whose reader has gone (`inferstream config show | head -1`) ends quietly."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_closed_pipe_ends_the_command_without_a_traceback() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes: every write fails
    try:
        done = subprocess.run([sys.executable, "-m", "inferstream", "config", "show",
                               "--bootstrap-servers", "127.0.0.1:1"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
