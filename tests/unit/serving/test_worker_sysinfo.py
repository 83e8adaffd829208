"""Workers publish system-information samples to the sysinfo topic, in memory: keyed by worker
id, calibrated before the first task, per-model throughput over the window, custom collectors
by entry point in `extra`, and no collector or broker failure reaching the task path."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inferstream.cli import build_parser, config_from_args, main
from inferstream.config import DEFAULT_COLLECTORS, Config, load_config
from inferstream.errors import ConfigError
from inferstream.kafka.topics import topic_specs
from inferstream.schemas.records import (
    ExtraFields,
    PublisherFields,
    SysInfoSample,
    TaskResult,
    read_record,
)
from inferstream.serving.collectors import (
    BUILTIN_COLLECTORS,
    PerformanceWindows,
    SampleContext,
    SampleFields,
    ServedModel,
    load_collectors,
)
from inferstream.serving.collectors.accelerator import AcceleratorCollector
from inferstream.serving.collectors.performance import item_seconds
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.serving.metrics import ServingMetrics
from inferstream.testing import MemoryBroker
from tests.unit.support.memory import CODEC
from tests.unit.support.memory import make_config as base_config
from tests.unit.support.records import consumed, put_tasks
from tests.unit.support.running import Running

RunWorker = Callable[..., Worker]


def make_config(**worker: Any) -> Config:
    return base_config(worker={"models": ("sim:ms=1",), "sysinfo_interval_s": 0.05,
                               "calibration_items": 4, **worker})


@pytest.fixture
def run_worker(broker: MemoryBroker, running: Running, make_worker: Callable[..., Worker]
               ) -> Callable[..., Worker]:
    def run(config: Config, hooks: WorkerHooks | None = None, samples: int = 0,
            until: Callable[[Worker], object] = lambda _: True) -> Worker:
        """A worker of `config` until every task is committed, `samples` samples are out
        and `until(worker)` holds."""
        worker = make_worker(config, hooks=hooks)
        running.workers(worker)

        def done() -> bool:
            """every task committed, the samples out, and what the test waits for"""
            return (consumed(broker, config.worker_group(), config.task_topic())
                    and (not samples or len(broker.records(config.topic("sysinfo"))) >= samples)
                    and bool(until(worker)))
        running.until(done)
        return worker
    return run


def samples(broker: MemoryBroker, config: Config) -> list[tuple[bytes | None, SysInfoSample]]:
    records = broker.records(config.topic("sysinfo"))
    return [(r.key, SysInfoSample(**CODEC.decode(r.value or b"", "SysInfoSample")))
            for r in records]


class Thermometer:
    """A custom collector, registered by entry point in `plugins`."""

    name = "thermometer"

    def collect(self, context: SampleContext) -> SampleFields:
        return ExtraFields(extra={"celsius": 41.5, "fans": 2})


class Broken:
    name = "broken"

    def collect(self, context: SampleContext) -> SampleFields:
        raise RuntimeError("sensor unplugged")


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on sys.path whose entry points register the two collectors above."""
    info = tmp_path / "site" / "fake_collectors-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-collectors\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [inferstream.collectors]
        thermometer = {__name__}:Thermometer
        broken = {__name__}:Broken
        """))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_samples_are_keyed_by_worker_id_and_calibrated_before_the_first_task(
        broker: MemoryBroker, run_worker: RunWorker) -> None:
    config = make_config(models=("sim:ms=10",))
    put_tasks(broker, config, 4)
    run_worker(config, samples=2)

    found = samples(broker, config)
    assert len(found) >= 2 and {key for key, _ in found} == {b"w1"}
    first = found[0][1]
    assert first["queue_depth"] == 0 and first["assigned_partitions"] == []
    assert first["models"][0]["items"] == 0  # taken before any task
    first_result = min(read_record(CODEC, v, TaskResult)["started_at"]
                       for v in broker.values(config.topic("results")))
    assert first["timestamp"] <= first_result
    calibration = first["calibration"]
    assert calibration is not None and calibration["model"] == "sim:ms=10"
    assert calibration["batch_size"] == 4
    # sim:ms=10 sleeps 10 ms an item, so no faster than 100 items/s; how much slower is the
    # host's load (31.7 under helpers' suites), no outcome of the code's (a timing)
    assert 0 < calibration["items_per_s"] <= 100.5
    assert all(s["calibration"] == calibration for _, s in found)
    assert first["served_models"] == ["sim:ms=10"] and first["device"] == "cpu"
    assert first["accelerator"] is None and first["gpu_memory_bytes"] is None
    assert {"inferstream", "python", "torch"} <= set(first["software"])
    assert first["software"]["model:sim:ms=10"] == "sim"


def test_each_model_reports_what_it_finished_over_the_window(
        broker: MemoryBroker, run_worker: RunWorker) -> None:
    config = make_config()
    put_tasks(broker, config, 10, items=4)

    def reported(_: Worker) -> bool:
        found = samples(broker, config)
        return bool(found) and found[-1][1]["models"][0]["items"] == 40 and (
            found[-1][1]["consumer_lag"] == 0)
    run_worker(config, until=reported)

    found = [s for _, s in samples(broker, config)]
    last = found[-1]
    (model,) = last["models"]
    assert model["model"] == "sim:ms=1" and model["version"] == "sim"
    assert model["items"] == 40  # the run is shorter than the window: every item counts
    assert model["items_per_s"] > 0 and last["throughput_items_per_s"] == model["items_per_s"]
    assert model["mean_batch_size"] is not None and 1 <= model["mean_batch_size"] <= 40
    assert model["batch_latency_seconds_p50"] is not None
    assert model["batch_latency_seconds_p95"] >= model["batch_latency_seconds_p50"]
    assert last["assigned_partitions"] == [0, 1]
    assert last["consumer_lag"] == 0  # everything committed
    assert last["memory_bytes"] > 0 and last["host_memory_available_bytes"]


def test_a_custom_collector_registered_by_entry_point_shows_in_extra(
        broker: MemoryBroker, run_worker: RunWorker, plugins: None) -> None:
    config = make_config(collectors=(*DEFAULT_COLLECTORS, "thermometer"))
    put_tasks(broker, config, 2)
    run_worker(config, samples=1)

    assert all(s["extra"] == {"celsius": 41.5, "fans": 2.0} for _, s in samples(broker, config))


def test_a_failing_collector_is_counted_and_the_worker_goes_on(
        broker: MemoryBroker, run_worker: RunWorker, plugins: None) -> None:
    config = make_config(collectors=("broken", "queue"))
    put_tasks(broker, config, 6)
    metrics = ServingMetrics(CollectorRegistry())
    worker = run_worker(config, metrics, samples=1)

    assert {read_record(CODEC, v, TaskResult)["task_id"]
            for v in broker.values(config.topic("results"))} == set(range(6))
    errors = metrics.registry.get_sample_value("inferstream_collector_errors_total",
                                               {"collector": "broken"})
    published = metrics.registry.get_sample_value("inferstream_worker_sysinfo_samples_total",
                                                  {"outcome": "published"})
    assert errors is not None and errors >= 1 and errors == worker.sysinfo.collector_errors
    assert published == len(samples(broker, config)) >= 1
    cpu_s = metrics.registry.get_sample_value("inferstream_sysinfo_collect_cpu_seconds_total")
    assert cpu_s == pytest.approx(worker.sysinfo.collect_cpu_s)


def test_samples_that_cannot_be_sent_are_counted_and_tasks_still_commit(
        broker: MemoryBroker, run_worker: RunWorker) -> None:
    # topics of their own (another prefix) on the test's broker, none for samples
    config = dataclasses.replace(make_config(), topic_prefix="nosysinfo.")
    broker.create_topics(s for s in topic_specs(config) if s.name != config.topic("sysinfo"))
    put_tasks(broker, config, 4)
    worker = run_worker(config)  # what is buffered at the stop is lost

    assert len(broker.values(config.topic("results"))) == 4
    assert worker.sysinfo.published == 0 and worker.sysinfo.failed >= 1


def test_an_unknown_collector_is_a_one_line_error_at_start(
        plugins: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown collector 'nope'"):
        load_collectors(["cpu", "nope"])
    code = main(["worker", "--model", "sim:ms=0", "--collector", "nope",
                 "--bootstrap-servers", "localhost:1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "unknown collector 'nope'" in err
    assert "thermometer" in err  # the registered ones are listed


def test_each_collector_fills_one_group_of_the_sample_and_the_groups_fill_the_schema() -> None:
    groups = {frozenset(typing.get_type_hints(kind)) for kind in typing.get_args(SampleFields)}
    fields = [*typing.get_type_hints(PublisherFields), *(f for g in groups for f in g)]
    assert sorted(fields) == sorted(typing.get_type_hints(SysInfoSample))  # each field once
    context = SampleContext(worker="w", pool="default", device="cpu", interval_s=2.0)
    filled = {frozenset(c.collect(context)) for c in load_collectors(BUILTIN_COLLECTORS).values()}
    assert filled == groups - {frozenset({"extra"})}  # `extra` is the custom collectors'
    assert set(DEFAULT_COLLECTORS) == set(BUILTIN_COLLECTORS)


def test_no_sysinfo_interval_means_no_samples_and_no_calibration(
        broker: MemoryBroker, run_worker: RunWorker) -> None:
    config = make_config(sysinfo_interval_s=0)
    put_tasks(broker, config, 2)
    worker = run_worker(config)

    assert samples(broker, config) == [] and worker.sysinfo.calibration is None


def test_a_worker_whose_decoding_sets_its_pace_reports_that_pace_not_its_models(
        broker: MemoryBroker, run_worker: RunWorker) -> None:
    """Items that take 5 ms each to decode on one decode thread, and a forward pass of 0.1 ms
    an item: the sample's seconds an item are the worker's, over 2.5 ms (5 ms, less what was
    decoded ahead of a batch taken with more waiting), not the model's 0.1 ms, whose 1 /
    rate would tell the policy ten times the speed the worker has."""
    config = make_config(models=("sim:ms=0.1,decode_ms=5",), decode_threads=1, max_batch=4)
    put_tasks(broker, config, 6, items=8)

    def reported(_: Worker) -> bool:
        found = samples(broker, config)
        return bool(found) and found[-1][1]["models"][0]["items"] == 48
    run_worker(config, until=reported)

    (model,) = samples(broker, config)[-1][1]["models"]
    assert model["item_seconds"] is not None and model["item_seconds"] > 0.0025


def test_seconds_an_item_are_the_batch_loops_where_it_had_work() -> None:
    """A window whose batches took 1 ms an item in the forward pass and 4 ms an item of the
    loop's wall time while a batch or more was waiting reports 4 ms; so does a later window
    without such batches (the worker fed less than a batch at a time is not its forward pass
    again); without any, or where the forward pass took longer, the forward pass's time."""
    windows = PerformanceWindows(window_s=10.0)
    model = ServedModel("sim:ms=1", "sim")
    windows.snapshot((model,), now=0.0)
    for batch in range(1, 11):
        windows.record(model, 8, 0.008, ended=batch * 0.032)
        windows.record_cycle(model, 8, 0.032, ended=batch * 0.032)
    (perf,) = windows.snapshot((model,), now=1.0).models
    assert perf["items"] == 80 and perf["item_seconds"] == pytest.approx(0.004)
    windows.record(model, 2, 0.002, ended=20.0)  # a later window: no batch had others waiting
    (later,) = windows.snapshot((model,), now=20.5).models
    assert later["items"] == 2 and later["item_seconds"] == pytest.approx(0.004)
    assert item_seconds(8, 0.008, None) == pytest.approx(0.001)
    assert item_seconds(8, 0.008, 0.0005) == pytest.approx(0.001)
    assert item_seconds(0, 0.0, 0.004) is None


def test_throughput_counts_the_last_window_only() -> None:
    """A model that runs 32-item batches of 0.32 s does 100 items/s; batches older than the
    window no longer count, and a model that stopped shows its latencies no more."""
    windows = PerformanceWindows(window_s=10.0)
    busy, idle = ServedModel("sim:ms=10", "sim"), ServedModel("sim:ms=40", "sim")
    windows.snapshot((busy, idle), now=0.0)  # both windows open at 0
    windows.record(idle, 8, 0.32, ended=1.0)
    for batch in range(1, 63):
        windows.record(busy, 32, 0.32, ended=batch * 0.32)
    perf = windows.snapshot((busy, idle), now=20.0)

    fast, slow = perf.models
    assert fast["items_per_s"] == pytest.approx(100, rel=0.05)
    assert fast["mean_batch_size"] == 32 and fast["item_seconds"] == pytest.approx(0.01)
    assert fast["batch_latency_seconds_p95"] == pytest.approx(0.32)
    assert slow["items"] == 0 and slow["batch_latency_seconds_p50"] is None
    assert perf.items_per_s == fast["items_per_s"]


def cuda_context(device: str) -> SampleContext:
    return SampleContext(worker="w", pool="default", device=device, interval_s=2.0)


def test_the_accelerator_collector_reports_a_cuda_device_and_never_imports_torch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    collector = AcceleratorCollector()
    monkeypatch.delitem(sys.modules, "torch")
    assert collector.collect(cuda_context("cuda:0")) == dict.fromkeys(
        ("accelerator", "gpu_utilization", "gpu_memory_bytes", "gpu_memory_total_bytes"))
    assert "torch" not in sys.modules

    def utilization(index: int) -> int:
        raise ModuleNotFoundError("No module named 'pynvml'")

    cuda = types.SimpleNamespace(get_device_name=lambda index: f"NVIDIA H200 #{index}",
                                 mem_get_info=lambda index: (100 << 30, 140 << 30),
                                 utilization=utilization)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert collector.collect(cuda_context("cuda:1")) == {
        "accelerator": "NVIDIA H200 #1", "gpu_utilization": None,
        "gpu_memory_bytes": 40 << 30, "gpu_memory_total_bytes": 140 << 30}
    assert collector.collect(cuda_context("cpu"))["accelerator"] is None


def test_sysinfo_settings_come_from_the_environment_and_flags() -> None:
    env = load_config({}, {"INFERSTREAM_WORKER_COLLECTORS": "cpu, queue",
                           "INFERSTREAM_WORKER_SYSINFO_INTERVAL_S": "0"})
    assert env.worker.collectors == ("cpu", "queue") and env.worker.sysinfo_interval_s == 0
    args = build_parser().parse_args(["worker", "--model", "m", "--collector", "gpu_temp",
                                      "--sysinfo-interval", "5"])
    worker = config_from_args(args).worker
    assert worker.collectors == ("gpu_temp",) and worker.sysinfo_interval_s == 5.0
    assert Config().worker.collectors == DEFAULT_COLLECTORS
    with pytest.raises(ConfigError, match="sysinfo_interval_s must be >= 0"):
        load_config({"worker": {"sysinfo_interval_s": -1}}, {})
