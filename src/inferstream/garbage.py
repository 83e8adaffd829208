"""The cyclic garbage collector's thresholds in an inferstream process (the `inferstream`
command sets them as it starts; an application that runs a worker or a stream member from
Python can call `tune_collector` itself).

CPython's defaults, (700, 10, 10), collect the youngest generation every 700 container
allocations (net of frees), and every 100th of those may be a full collection, which scans
every live object: torch's modules and, in a worker, every item result of every task in
flight. A worker's items each make a few containers (an ItemResult and its top-k dicts)
that live as long as their task, seconds, so they reach the oldest generation and the full
collections keep coming: 19 of them, 2.5-2.8 s of a worker's 14.4 s of CPU in a 200,000-item
`sim:ms=0` job, and 15 (0.43 s of 2.4) in its controller's. With the youngest generation's
threshold at 10,000 the same job made 1 full collection in each, and ran 1.2-1.3x faster
(BENCHMARKS.md, "The worker's garbage"). Memory does not grow with it: what the collector
frees is cyclic garbage only, and the data path makes next to none (a finished task's run
lets go of its callback, `serving.pipeline.TaskRun.end`).
"""

from __future__ import annotations

import gc

#: Container allocations (net of frees) between collections of the youngest generation.
YOUNG_THRESHOLD = 10_000


def tune_collector() -> None:
    """Collect the youngest generation every `YOUNG_THRESHOLD` allocations, the older two as
    CPython does by default (every 10 collections of the one below)."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)


def spare_the_teardown() -> None:
    """As the program ends (an atexit callback, so after its threads were joined): move every
    object to the collector's permanent generation, which the interpreter's teardown does
    not scan. That teardown collects every generation, torch's modules and whatever else is
    still alive: 1.3-2.6 s of an exit at a load of 10-20 on 2 cores, where a worker drained
    within a second of its SIGTERM and its supervisor, or an orchestrator's grace, waited for
    the rest (0.3-0.9 s with this). Nothing is lost: reference counting frees what it
    frees, and the memory goes with the process."""
    gc.freeze()
