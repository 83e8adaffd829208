"""ops/bench/pipeline_cpu.py on a few tasks: every item goes through, and each round says
how much CPU and wall time an item took."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import pipeline_cpu


def test_each_round_takes_every_item_and_measures_it() -> None:
    rounds = pipeline_cpu.main(["--tasks", "10", "--items", "7", "--rounds", "2"])
    assert [r.items for r in rounds] == [70, 70]
    assert all(r.items_per_s > 0 and r.cpu_us_per_item > 0 and r.wall_us_per_item > 0
               for r in rounds)
    assert all(abs(r.items_per_s * r.wall_us_per_item / 1e6 - 1) < 1e-6 for r in rounds)
