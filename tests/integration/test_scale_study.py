"""Issue 15's small version of the scale study on the real broker: one and ten simulated
nodes (ten as members of one process), each job complete with every item exactly once, and
the table and the plot written. Outcomes only: speed is what `make scale-study` measures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ops" / "bench"))

import scale_study

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_one_and_ten_nodes_complete_every_item_once(tmp_path: Path) -> None:
    points = scale_study.main(["--nodes", "1", "10", "--profiles", "alexnet", "--job-s", "6",
                               "--members-per-process", "10", "--no-outage", "--no-mix",
                               "--no-probe", "--out", str(tmp_path)])
    assert [(p.nodes, p.run) for p in points] == [(1, "sweep"), (10, "sweep")]
    assert all(p.exactly_once and p.lost == 0 and p.duplicates == 0 for p in points), points
    assert points[0].speedup == 1.0 and points[1].speedup is not None
    # every node's start, idle time and tail, read back from the committed results
    assert [p.extra["timeline"]["nodes"] for p in points] == [1, 10]
    table = (tmp_path / "scale_study.md").read_text()
    assert "| alexnet | 10 | sweep |" in table
    assert (tmp_path / "scale_study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
