"""A command's own peak RSS and CPU time, measured as GNU time measures them.

`wait4`'s `ru_maxrss` of a child that this process forks is at least this process's RSS at
the fork: Linux starts the child's peak from the memory it shares with its parent, and keeps
the peak across `exec`. A benchmark that holds a large table would read its own size as the
client's. So the command is started by a small Python process of its own (about 10 MiB), which
forks it, waits for it, and writes its usage to a file:

    python ops/bench/child_usage.py USAGE_FILE COMMAND [ARG...]

The file holds "<peak RSS KiB> <user + system CPU s>"; the wrapper exits with the command's
exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Usage:
    returncode: int
    cpu_s: float
    peak_rss_mib: float


def run_measured(command: list[str], usage_file: Path, stdout: IO[bytes], stderr: IO[bytes],
                 env: dict[str, str] | None = None) -> Usage:
    """Run `command` to its end through the wrapper; its exit status and its own usage."""
    done = subprocess.run([sys.executable, __file__, str(usage_file), *command],
                          stdout=stdout, stderr=stderr, env=env, check=False)
    peak_kib, cpu_s = usage_file.read_text().split()
    return Usage(done.returncode, float(cpu_s), int(peak_kib) / 1024)


def main(argv: list[str]) -> int:
    usage_file, command = Path(argv[0]), argv[1:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)  # noqa: S606 - the benchmark's own command
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    usage_file.write_text(f"{usage.ru_maxrss} {usage.ru_utime + usage.ru_stime}\n")
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
