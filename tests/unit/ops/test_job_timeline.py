"""`ops/bench/job_timeline.py`: a job's start, its nodes' idle stretches and its tail, from
the committed results the scale study reads back."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

from job_timeline import timeline

from tests.chaos.verifier import CommittedResult

T0 = 1_000.0


def result(worker: str, started: float, finished: float, job: str = "job") -> CommittedResult:
    return CommittedResult(job_id=job, task_id=0, attempt=1, worker=worker, partition=0,
                           offset=0, items=[("x", "ok")], started_at=T0 + started,
                           finished_at=T0 + finished)


def test_a_node_is_idle_only_when_a_task_comes_after_all_it_held_was_done() -> None:
    results = [
        result("a", 1.0, 4.0), result("a", 1.0, 7.0),  # the second queued behind the first
        result("a", 9.0, 12.0),  # came 2 s after a's last was done: idle
        result("b", 2.0, 5.0), result("b", 5.02, 8.0),  # a hand-over, not waiting
        result("c", 0.0, 99.0, job="another job"),
    ]
    line = timeline(results, "job", T0)
    assert line is not None
    assert (line.nodes, line.first_start_s, line.last_start_s) == (2, 1.0, 2.0)
    assert (line.first_done_s, line.median_done_s, line.last_done_s) == (8.0, 10.0, 12.0)
    assert (line.idle_total_s, line.idle_median_s, line.idle_nodes) == (2.0, 1.0, 1)
    assert "idle 2.0 node-s in all (1 nodes" in line.line()


def test_a_job_without_results_has_no_timeline() -> None:
    assert timeline([result("a", 1.0, 2.0, job="another job")], "job", T0) is None
