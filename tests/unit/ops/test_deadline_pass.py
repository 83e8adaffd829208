"""`ops/bench/deadline_pass.py` times passes over a pool none of whose tasks is due."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import deadline_pass


def test_a_healthy_pool_s_passes_move_nothing_and_cost_some_cpu() -> None:
    cpu_ms, moved = deadline_pass.pass_cpu_ms(workers=10, tasks=30, passes=3)
    assert moved == 0
    assert cpu_ms > 0
