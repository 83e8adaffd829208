"""The worker's decode -> batch -> infer path, in memory (no broker)."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import threading
import time
import weakref
from typing import Any

import torch

from inferstream.client.client import JobStatus
from inferstream.client.progress import ProgressBar
from inferstream.config import WorkerConfig
from inferstream.jobs.output import output_lines, write_lines
from inferstream.models import ItemError, load_model
from inferstream.models.outputs import Embedding, NamedTensor, Tensors
from inferstream.models.sim import SimModel, SimParams
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.pipeline import BatchingPipeline, TaskRun


class Recorder(WorkerHooks):
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.decoded: list[bool] = []
        self.cycles: list[tuple[int, float]] = []

    def after_batch_cycle(self, model: str, size: int, seconds: float,
                          version: str | None = None) -> None:
        self.cycles.append((size, seconds))

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        self.batches.append(size)

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        self.decoded.append(ok)


class PickyModel(SimModel):
    """A sim model that refuses items named bad-* and whose forward fails on demand."""

    fail_forward = False

    def preprocess(self, data: bytes) -> torch.Tensor:
        if data.startswith(b"bad"):
            raise ItemError("not an image")
        return super().preprocess(data)

    def predict(self, batch: torch.Tensor, top_k: int) -> list[Any]:
        if self.fail_forward:
            raise RuntimeError("CUDA out of memory")
        return super().predict(batch, top_k)


def task(task_id: int, names: list[str], top_k: int = 3) -> dict[str, Any]:
    return {"job_id": "j", "task_id": task_id, "attempt": 1, "pool": "default",
            "model": "sim:ms=0", "top_k": top_k, "issued_at": 0, "deadline_ms": None,
            "items": [{"index": i, "name": n, "data": None} for i, n in enumerate(names)]}


async def run_tasks(model: Any, tasks: list[dict[str, Any]], hooks: WorkerHooks,
                    max_batch: int = 4) -> list[TaskRun]:
    pipeline = BatchingPipeline(model, WorkerConfig(max_batch=max_batch, max_wait_ms=50,
                                                       decode_threads=2), hooks)
    done: list[TaskRun] = []
    loop = asyncio.create_task(pipeline.run_forever())
    try:
        for spec in tasks:
            pipeline.submit(TaskRun(spec, on_done=done.append))
        while len(done) < len(tasks):
            await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        pipeline.close()
    assert pipeline.items_in_flight == 0
    return done


def test_items_of_several_tasks_share_batches_and_bad_items_become_errors() -> None:
    hooks = Recorder()
    model = PickyModel("sim:ms=0", SimParams(ms=0))
    tasks = [task(0, ["a", "bad-1", "b"]), task(1, ["c", "d", "e", "bad-2"], top_k=1)]
    done = asyncio.run(run_tasks(model, tasks, hooks))
    by_task = {run.task["task_id"]: run for run in done}
    first = by_task[0].outcomes
    assert [o["status"] for o in first] == ["OK", "ERROR", "OK"]  # type: ignore[index]
    assert first[1] == {"index": 1, "name": "bad-1", "status": "ERROR", "top_k": [],
                        "embedding": None, "tensors": [], "error": "not an image"}
    assert all(len(o["top_k"]) == 1 for o in by_task[1].outcomes if o["status"] == "OK")  # type: ignore[index]
    assert sum(hooks.batches) == 5 and max(hooks.batches) <= 4
    assert hooks.decoded.count(False) == 2


def test_batches_taken_with_more_waiting_report_the_loops_time_for_them() -> None:
    """12 items of 10 ms decode each on 2 decode threads, batches of 4: every batch is taken
    with at least a batch waiting, and the loop's time for them is at least the 60 ms their
    decoding takes (less the first items', which start decoding before the loop's clock),
    whatever the forward pass's; items that come one at a time, with nothing else waiting,
    report no such time."""
    hooks = Recorder()
    model = SimModel("sim:ms=0,decode_ms=10", SimParams(ms=0, decode_ms=10))
    asyncio.run(run_tasks(model, [task(0, [f"i{n}" for n in range(12)])], hooks))
    assert [size for size, _ in hooks.cycles] == [4, 4, 4]
    assert sum(seconds for _, seconds in hooks.cycles) >= 0.05

    trickle = Recorder()

    async def one_at_a_time() -> None:
        for n in range(3):
            await run_tasks(model, [task(n, [f"i{n}"])], trickle)
    asyncio.run(one_at_a_time())
    assert trickle.batches == [1, 1, 1] and trickle.cycles == []


def test_a_run_lets_go_of_its_callback_once_it_ended_or_was_given_up() -> None:
    """The callback holds what holds the run (the worker's pending task): kept, that cycle
    would hold every item's outcome until the cyclic garbage collector found it."""
    called: list[str] = []
    for finish in ("end", "cancel"):
        holder: dict[str, TaskRun] = {}
        holder["run"] = TaskRun(task(0, ["a"]), on_done=lambda run, h=holder: called.append(
            h["run"].task["job_id"]))
        gone = weakref.ref(holder["run"])
        getattr(holder["run"], finish)()
        del holder
        assert gone() is None  # freed by its reference count, with the collector never run
    assert len(called) == 1  # `end` called back once; `cancel` calls nobody


def test_a_failed_forward_pass_fails_its_items_not_the_worker() -> None:
    model = PickyModel("sim:ms=0", SimParams(ms=0))
    model.fail_forward = True
    done = asyncio.run(run_tasks(model, [task(0, ["a", "b"])], WorkerHooks()))
    reasons = {o["error"] for o in done[0].outcomes}  # type: ignore[index]
    assert reasons == {"inference failed: RuntimeError: CUDA out of memory"}


class OutputModel(PickyModel):
    """A model of another output kind: an embedding (the item's hash in two floats) or two
    named tensors, per item."""

    def __init__(self, kind: str) -> None:
        super().__init__("sim:ms=0", SimParams(ms=0))
        self.version, self.kind = "7", kind

    def predict(self, batch: torch.Tensor, top_k: int) -> list[Any]:
        hashes = [int(h) % 1000 for h in batch[:, 0].tolist()]
        if self.kind == "embedding":
            return [Embedding((h / 4, -0.5)) for h in hashes]
        return [Tensors((NamedTensor("box", "int32", (2,), struct.pack("<2i", h, -h)),
                         NamedTensor("score", "float32", (), struct.pack("<f", 0.25))))
                for h in hashes]


def test_embeddings_and_tensors_become_the_item_results_fields() -> None:
    """Bad items stay errors; good ones hold the model's output in the field of its kind,
    and the run records the model's version."""
    embedded, = asyncio.run(run_tasks(OutputModel("embedding"), [task(0, ["a", "bad", "b"])],
                                      WorkerHooks()))
    assert embedded.model_version == "7"
    hashes = [int(OutputModel("embedding").preprocess(n)[0]) % 1000 for n in (b"a", b"b")]
    first, bad, last = embedded.outcomes
    assert first == {"index": 0, "name": "a", "status": "OK", "top_k": [],
                     "embedding": [hashes[0] / 4, -0.5], "tensors": [], "error": None}
    assert bad is not None and (bad["status"], bad["embedding"]) == ("ERROR", None)
    assert last is not None and last["embedding"] == [hashes[1] / 4, -0.5]
    tensors, = asyncio.run(run_tasks(OutputModel("tensor"), [task(0, ["a"])], WorkerHooks()))
    only = tensors.outcomes[0]
    assert only is not None and (only["top_k"], only["embedding"]) == ([], None)
    assert only["tensors"] == [
        {"name": "box", "dtype": "int32", "shape": [2],
         "data": struct.pack("<2i", hashes[0], -hashes[0])},
        {"name": "score", "dtype": "float32", "shape": [], "data": struct.pack("<f", 0.25)}]


def test_an_empty_task_finishes_at_once() -> None:
    model = load_model("sim:ms=0")
    done = asyncio.run(run_tasks(model, [task(0, [])], WorkerHooks()))
    assert done[0].done and done[0].outcomes == []


def test_output_lines_follow_item_order_and_csv_has_top1_columns() -> None:
    result = {"job_id": "j", "task_id": 0, "attempt": 2, "worker": "w", "model": "m",
              "model_version": "3", "items": [
        {"index": 1, "name": "b.jpg", "status": "ERROR", "top_k": [], "embedding": None,
         "tensors": [], "error": "not an image"},
        {"index": 0, "name": "a.jpg", "status": "OK", "error": None, "embedding": None,
         "tensors": [], "top_k": [{"class_id": 967, "label": "espresso", "score": 0.9}]},
    ]}
    lines = list(output_lines([result]))
    assert [line["item"] for line in lines] == ["a.jpg", "b.jpg"]
    buffer = io.StringIO()
    write_lines(iter(lines), buffer)
    first = json.loads(buffer.getvalue().splitlines()[0])
    assert first == {"job_id": "j", "item": "a.jpg", "status": "ok", "error": None,
                     "top_k": [{"class_id": 967, "label": "espresso", "score": 0.9}],
                     "worker": "w", "attempt": 2, "model": "m", "model_version": "3"}
    buffer = io.StringIO()
    write_lines(iter(lines), buffer, "csv")
    rows = buffer.getvalue().splitlines()
    assert rows[0] == ("job_id,item,status,class_id,label,score,error,worker,attempt,model,"
                       "model_version")
    assert rows[1] == "j,a.jpg,ok,967,espresso,0.9,,w,2,m,3"
    assert rows[2] == "j,b.jpg,error,,,,not an image,w,2,m,3"


def test_the_progress_bar_shows_done_total_rate_and_eta() -> None:
    status = JobStatus("j", "PROGRESS", total_items=200, done_items=50, rate_items_per_s=25.0)
    text = ProgressBar(io.StringIO(), width=10).render(status)
    assert "50/200 25%" in text and "25.0 items/s" in text and "ETA 0:00:06" in text


class CountingModel(SimModel):
    """A sim model whose batches take 20 ms, counting the items decoded and the items that
    went into a forward pass, and the most decoded items waiting for one."""

    def __init__(self) -> None:
        super().__init__("sim:ms=0", SimParams(ms=0))
        self.decoded = 0
        self.forwarded = 0
        self.most_waiting = 0

    def preprocess(self, data: bytes) -> torch.Tensor:
        tensor = super().preprocess(data)
        self.decoded += 1
        self.most_waiting = max(self.most_waiting, self.decoded - self.forwarded)
        return tensor

    def predict(self, batch: torch.Tensor, top_k: int) -> list[Any]:
        self.forwarded += len(batch)
        time.sleep(0.02)
        return super().predict(batch, top_k)


def test_items_are_decoded_at_most_decode_ahead_batches_ahead_of_the_model() -> None:
    model = CountingModel()
    tasks = [task(t, [f"item-{t}-{i}" for i in range(8)]) for t in range(6)]

    async def run() -> list[TaskRun]:
        pipeline = BatchingPipeline(model, WorkerConfig(
            max_batch=4, max_wait_ms=5, decode_threads=2, decode_ahead=1), Recorder())
        done: list[TaskRun] = []
        loop = asyncio.create_task(pipeline.run_forever())
        try:
            for spec in tasks:  # 48 items at once, as when a worker's fetch brings 6 tasks
                pipeline.submit(TaskRun(spec, on_done=done.append))
            while len(done) < len(tasks):
                await asyncio.sleep(0.01)
        finally:
            loop.cancel()
            pipeline.close()
        return done

    done = asyncio.run(run())
    assert sorted(r.task["task_id"] for r in done) == list(range(6))
    assert all(o is not None and o["status"] == "OK" for r in done for o in r.outcomes)
    assert model.decoded == model.forwarded == 48
    # one batch ahead, and the one the batch loop has taken but not yet passed on
    assert model.most_waiting <= 2 * 4, model.most_waiting


class SlowDecodeModel(SimModel):
    """A sim model whose items take 5 ms each to decode (a photo's order of magnitude),
    counting the decodes running at once."""

    def __init__(self) -> None:
        super().__init__("sim:ms=0", SimParams(ms=0))
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def preprocess(self, data: bytes) -> torch.Tensor:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(0.005)
        with self._lock:
            self.running -= 1
        return super().preprocess(data)


def test_slow_items_still_decode_on_every_decode_thread() -> None:
    model = SlowDecodeModel()
    tasks = [task(t, [f"photo-{t}-{i}" for i in range(8)]) for t in range(4)]
    done = asyncio.run(run_tasks(model, tasks, WorkerHooks(), max_batch=8))
    assert all(o is not None and o["status"] == "OK" for r in done for o in r.outcomes)
    assert model.most_running == 2  # decode_threads=2


def test_fast_items_decoded_several_to_a_job_each_keep_their_own_outcome() -> None:
    """Items that decode in microseconds go to the decode threads in groups; every item
    still gets its own prediction, in its task's order, and one decode hook."""
    hooks = Recorder()
    model = PickyModel("sim:ms=0", SimParams(ms=0))
    tasks = [task(t, [f"bad-{t}" if i == 5 else f"item-{t}-{i}" for i in range(32)])
             for t in range(8)]
    done = asyncio.run(run_tasks(model, tasks, hooks, max_batch=32))
    reference = SimModel("sim:ms=0", SimParams(ms=0))
    for run in sorted(done, key=lambda r: r.task["task_id"]):
        names = [item["name"] for item in run.task["items"]]
        assert [o["name"] for o in run.outcomes] == names  # type: ignore[index]
        for name, outcome in zip(names, run.outcomes, strict=True):
            assert outcome is not None
            if name.startswith("bad"):
                assert outcome["error"] == "not an image"
                continue
            expected = reference.predict(reference.preprocess(name.encode())[None], 3)[0]
            assert [p["class_id"] for p in outcome["top_k"]] == [c for c, _, _ in expected]
    assert len(hooks.decoded) == 256 and hooks.decoded.count(False) == 8


class FetchesSomeModel(SlowDecodeModel):
    """Items named `remote-*` take 15 ms to fetch (a download); the others decode at once."""

    def preprocess(self, data: bytes) -> torch.Tensor:
        if data.startswith(b"remote"):
            return super().preprocess(data)
        return SimModel.preprocess(self, data)

    def fetch(self, name: str, data: bytes | None = None, **_: object) -> bytes:
        if name.startswith("remote"):
            time.sleep(0.015)
        return super().fetch(name, data)

    def fetch_may_wait(self, name: str, data: bytes | None = None) -> bool:
        return name.startswith("remote")


async def decode_after(model: Any, first: list[dict[str, Any]], cancelled: bool,
                       then: list[str]) -> list[int]:
    """Run the tasks `first` (given up at once where `cancelled`), then a task of the items
    `then`, on 4 decode threads: the sizes of the decode jobs its items went in (what the
    pipeline decided, not which threads happened to run at once on a busy machine)."""
    pipeline = BatchingPipeline(model, WorkerConfig(max_batch=32, max_wait_ms=5,
                                                       decode_threads=4), WorkerHooks())
    done: list[TaskRun] = []
    loop = asyncio.create_task(pipeline.run_forever())
    try:
        for spec in first:
            pipeline.submit(run := TaskRun(spec, on_done=done.append))
            run.cancelled = cancelled
        while pipeline.items_in_flight:
            await asyncio.sleep(0.01)
        sizes: list[int] = []
        decode_all = pipeline._decode_all

        def recorded(job: list[Any]) -> list[tuple[torch.Tensor | str, float]]:
            sizes.append(len(job))
            return decode_all(job)

        pipeline._decode_all = recorded  # type: ignore[method-assign]
        pipeline.submit(TaskRun(task(9, then), on_done=done.append))
        while pipeline.items_in_flight:
            await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        pipeline.close()
    assert [o["status"] for o in done[-1].outcomes] == ["OK"] * len(then)  # type: ignore[index]
    return sizes


def test_a_few_slow_items_after_fast_ones_still_decode_on_every_decode_thread() -> None:
    """A download after many microsecond items does not wait for the other downloads
    of its task on one thread."""
    fast = [task(t, [f"item-{t}-{i}" for i in range(32)]) for t in range(4)]
    remote = [f"remote-{i}" for i in range(8)]
    sizes = asyncio.run(decode_after(FetchesSomeModel(), fast, False, remote))
    assert sum(sizes) == 8 and max(sizes) == 2  # each of the 4 threads' share


def test_items_of_a_task_given_up_do_not_count_as_decoded_in_no_time() -> None:
    """Photos after a revoked task's items (not decoded at all) still decode one to a
    thread: the revoked items did not make photos look like microsecond items."""
    revoked = [task(t, [f"photo-{t}-{i}" for i in range(32)]) for t in range(4)]
    photos = [f"photo-{i}" for i in range(8)]
    sizes = asyncio.run(decode_after(SlowDecodeModel(), revoked, True, photos))
    assert sum(sizes) == 8 and max(sizes) <= 2  # no thread takes more than its share
