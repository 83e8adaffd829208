"""Where a job's time goes on its nodes: the start, the nodes' idle stretches, the tail.

From the job's committed TaskResults (the chaos verifier's reader, which the scale study
reads them with to check every item once): a node takes a task when
its worker accepts it (`started_at`: the task may wait behind others there) and is done with
it at `finished_at`. A node is *idle* between one task's finish and the next task's arrival
when the next one came later: nothing was queued on it, so it waited on the controller.
The scale study prints one line of these per job (`scale_study.py`), which is how the
pacing of a job's start at N = 100 was found wanting (BENCHMARKS.md, "Where a job's time
goes at N = 100").
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class Ran(Protocol):
    """A committed task attempt: which job, which node, when it was taken and done (epoch s)."""

    job_id: str
    worker: str
    started_at: float
    finished_at: float


@dataclass(frozen=True)
class Timeline:
    """Seconds since the job's submission (`*_s`) or in all (`idle_*`)."""

    nodes: int
    first_start_s: float  # the first task taken anywhere
    last_start_s: float  # the last node to take its first task
    first_done_s: float  # the first node to finish its last task
    median_done_s: float
    last_done_s: float  # the job's last task finished
    idle_total_s: float  # summed over the nodes
    idle_median_s: float  # a node's, the median node
    idle_nodes: int  # nodes idle at least once for more than `IDLE_FLOOR_S`

    def line(self) -> str:
        return (f"nodes {self.nodes}: first task taken at {self.first_start_s:.2f} s (last node "
                f"{self.last_start_s:.2f}); idle {self.idle_total_s:.1f} node-s in all "
                f"({self.idle_nodes} nodes, median {self.idle_median_s:.2f} s); last tasks "
                f"done {self.first_done_s:.2f} / {self.median_done_s:.2f} / "
                f"{self.last_done_s:.2f} s (first node / median / last)")


#: gaps shorter than this are a task's own hand-over, not waiting
IDLE_FLOOR_S = 0.05


def timeline(results: Iterable[Ran], job_id: str, submitted_at: float) -> Timeline | None:
    """The job's timeline from its results (the attempt a node ran counts for that node);
    None when it has none."""
    by_node: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for result in results:
        if result.job_id == job_id:
            by_node[result.worker].append((result.started_at - submitted_at,
                                           result.finished_at - submitted_at))
    if not by_node:
        return None
    idle = {node: _idle(sorted(spans)) for node, spans in by_node.items()}
    firsts = [min(start for start, _ in spans) for spans in by_node.values()]
    lasts = [max(done for _, done in spans) for spans in by_node.values()]
    return Timeline(
        nodes=len(by_node), first_start_s=min(firsts), last_start_s=max(firsts),
        first_done_s=min(lasts), median_done_s=statistics.median(lasts),
        last_done_s=max(lasts), idle_total_s=sum(idle.values()),
        idle_median_s=statistics.median(idle.values()),
        idle_nodes=sum(1 for seconds in idle.values() if seconds > IDLE_FLOOR_S))


def _idle(spans: list[tuple[float, float]]) -> float:
    """Seconds a node waited with nothing queued: each task taken after everything it held
    before was done, by that much."""
    idle, busy_until = 0.0, spans[0][1]
    for start, done in spans[1:]:
        if start - busy_until > IDLE_FLOOR_S:
            idle += start - busy_until
        busy_until = max(busy_until, done)
    return idle
