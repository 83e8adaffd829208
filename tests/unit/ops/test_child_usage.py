"""`child_usage.run_measured` reports a command's own peak RSS, not its parent's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))
from child_usage import run_measured

BIG = 300 * 2**20
SMALL = [sys.executable, "-c", "x = bytearray(40 * 2**20); print(len(x))"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB is Linux's")
def test_a_child_of_a_large_process_is_measured_alone(tmp_path: Path) -> None:
    held = bytearray(BIG)  # this process: over 300 MiB resident
    held[:: 4096] = b"x" * len(held[:: 4096])
    with (tmp_path / "out").open("wb") as out, (tmp_path / "err").open("wb") as err:
        usage = run_measured(SMALL, tmp_path / "usage", out, err)
        plain = subprocess.Popen(SMALL, stdout=out, stderr=err)
        _, status, direct = os.wait4(plain.pid, 0)
        plain.returncode = os.waitstatus_to_exitcode(status)
    assert usage.returncode == 0 and (tmp_path / "out").read_text().split()[0] == str(40 * 2**20)
    assert 40 < usage.peak_rss_mib < 120 and usage.cpu_s > 0
    assert direct.ru_maxrss / 1024 > 300  # what wait4 of a plain child says: the parent's size
    del held
