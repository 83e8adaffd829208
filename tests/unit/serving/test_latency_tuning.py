"""Online batch tuning for a latency target (issue 29.5): AIMD keeps wait + forward pass under
the target, grows the batch only when the batch size bounded it, and tunes a real pipeline."""

from __future__ import annotations

import asyncio

import pytest

from inferstream.config import WorkerConfig, load_config
from inferstream.errors import ConfigError
from inferstream.models.sim import SimModel, SimParams
from inferstream.serving.pipeline import BatchingPipeline, TaskRun
from inferstream.serving.tuning import LatencyTuner
from tests.unit.serving.test_batching_pipeline import Recorder, task


def run_full_batches(tuner: LatencyTuner, ms_per_item: float, batches: int) -> list[int]:
    """Feed `tuner` batches as full as it allows, each taking `ms_per_item` per item."""
    sizes = []
    for _ in range(batches):
        sizes.append(tuner.limit)
        tuner.observe(tuner.limit, tuner.limit * ms_per_item / 1000)
    return sizes


def test_full_batches_settle_where_wait_and_forward_pass_meet_the_target() -> None:
    tuner = LatencyTuner(target_s=0.1, max_batch=64, max_wait_s=0.01)
    sizes = run_full_batches(tuner, ms_per_item=5.0, batches=300)
    settled = sizes[-100:]
    assert 18 <= min(settled) and max(settled) <= 20, settled  # 20 x 5 ms: the target
    assert tuner.wait_s + max(settled) * 5.0 / 1000 <= 0.1


def test_a_slower_model_shrinks_the_batch_and_its_wait() -> None:
    tuner = LatencyTuner(target_s=0.1, max_batch=64, max_wait_s=0.01)
    run_full_batches(tuner, ms_per_item=1.0, batches=200)
    fast_limit, fast_wait = tuner.limit, tuner.wait_s
    assert fast_limit >= 60 and fast_wait == pytest.approx(0.01)
    run_full_batches(tuner, ms_per_item=10.0, batches=200)
    assert tuner.limit <= 10 and tuner.wait_s < fast_wait


def test_batches_the_size_did_not_bound_do_not_grow_it() -> None:
    tuner = LatencyTuner(target_s=0.1, max_batch=64, max_wait_s=0.01)
    start = tuner.limit
    for _ in range(50):
        tuner.observe(2, 0.002)  # a trickle: the wait closed each batch, not the size
    assert tuner.limit == start


def test_the_ceiling_bounds_the_tuned_size() -> None:
    tuner = LatencyTuner(target_s=1.0, max_batch=64, max_wait_s=0.01)
    tuner.set_ceiling(6)
    assert max(run_full_batches(tuner, ms_per_item=1.0, batches=100)) == 6


async def tuned_batches(target_ms: float | None) -> list[int]:
    """Batch sizes of 20 tasks of 8 items through a pipeline whose model takes 2 ms an item,
    with a latency target (or none: max_batch 32 every time)."""
    hooks = Recorder()
    model = SimModel("sim:ms=2", SimParams(ms=2))
    pipeline = BatchingPipeline(model, WorkerConfig(
        max_batch=32, max_wait_ms=4, decode_threads=2, latency_target_ms=target_ms), hooks)
    done: list[TaskRun] = []
    loop = asyncio.create_task(pipeline.run_forever())
    try:
        for t in range(20):
            pipeline.submit(TaskRun(task(t, [f"{t}-{i}" for i in range(8)]), on_done=done.append))
        while len(done) < 20:
            await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        pipeline.close()
    return hooks.batches


def test_a_pipeline_with_a_target_runs_batches_that_fit_it() -> None:
    assert max(asyncio.run(tuned_batches(None))) == 32
    tuned = asyncio.run(tuned_batches(20.0))
    assert sum(tuned) == 160
    assert max(tuned[len(tuned) // 2:]) <= 10, tuned  # 2 ms an item: 20 ms holds <= 10


def test_a_target_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="latency_target_ms must be > 0"):
        load_config({}, {"INFERSTREAM_WORKER_LATENCY_TARGET_MS": "0"})
