"""Issue 14.1: the metrics bundles by themselves: bounded job series, lag series that leave
with their partition, and each exposition passing `promtool check metrics`. What the roles
count in a run is tested with them: test_controller_memory.py and test_worker_memory.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from inferstream.controller.hooks import JobProgress, RoundState
from inferstream.controller.metrics import ControllerMetrics
from inferstream.metrics import reason_label
from inferstream.schemas.records import LedgerStatus
from inferstream.stream.metrics import StreamMetrics
from inferstream.sysinfo.metrics import SysinfoMetrics
from tests.unit.promtool import check_metrics, sample


def test_job_progress_series_are_bounded_and_leave_with_their_job() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    active = [JobProgress(f"job-{i:02d}", i, 100) for i in range(30)]
    metrics.after_round(0.01, RoundState({LedgerStatus.ACTIVE.value: 30}, 4, active))
    r = metrics.registry
    shown = {s.labels["job_id"] for m in r.collect() if m.name == "inferstream_job_items_done"
             for s in m.samples}
    assert shown == {f"job-{i:02d}" for i in range(20)}  # the 20 oldest
    metrics.after_round(0.01, RoundState({LedgerStatus.COMPLETED.value: 30}, 4, []))
    assert r.get_sample_value("inferstream_job_items_done", {"job_id": "job-00"}) is None
    assert r.get_sample_value("inferstream_job_items", {"job_id": "job-00"}) is None
    assert sample(r, "inferstream_controller_jobs", state="COMPLETED") == 30


def test_lag_series_of_partitions_no_longer_owned_are_removed() -> None:
    metrics = StreamMetrics(CollectorRegistry(), "s1", "stream-pool")
    metrics.on_load(3, {0: 5, 1: 7})
    metrics.on_load(1, {1: 2})
    r = metrics.registry
    assert r.get_sample_value("inferstream_consumer_lag_records",
                              {"worker": "s1", "pool": "stream-pool", "partition": "0"}) is None
    assert r.get_sample_value("inferstream_stream_lag_records", {"partition": "0"}) is None
    assert sample(r, "inferstream_stream_lag_records", partition="1") == 2
    assert sample(r, "inferstream_in_flight_items", worker="s1", pool="stream-pool") == 1
    metrics.after_stream_record("ok", 0.2)
    check_metrics(generate_latest(r))


def test_the_sysinfo_metrics_pass_promtool() -> None:
    metrics = SysinfoMetrics(CollectorRegistry())
    metrics.samples.labels("ok").inc()
    metrics.share.labels("default", "w1").set(0.5)
    metrics.capacity.labels("default", "w1").set(120.0)
    metrics.stale.labels("default").set(0)
    metrics.strategy_time.labels("capacity").observe(0.001)
    check_metrics(generate_latest(metrics.registry))


def test_dead_letter_reasons_are_a_bounded_label() -> None:
    assert reason_label("unknown fingerprint 0x1f2e3d4c5b6a7988: not a schema of ours") == \
        "unknown fingerprint"
    assert reason_label("undecodable task record: bad magic") == "undecodable task record"
    assert reason_label("0x00 at offset 12") == "other"
