"""Workers publish system-information samples to the sysinfo topic on a real broker."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.kafka.reader import PartitionReader, reader_consumer
from inferstream.schemas import Codec
from tests.integration.conftest import Processes

pytestmark = pytest.mark.integration

#: The worker's performance window (collectors.performance.MIN_WINDOW_S at the 2 s default).
WINDOW_S = 10.0
#: About 30 s of work at 100 items/s: about 8 samples (one every 2 s) whose whole window lies
#: inside the job, where the test needs 5.
ITEMS = 3000


def read_samples(config: Config) -> list[dict[str, Any]]:
    """Every sample on the sysinfo topic so far, in offset order per partition."""
    codec, topic = Codec(None), config.topic("sysinfo")
    consumer = reader_consumer(config)
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return [codec.decode(r.value, "SysInfoSample")
                for r in PartitionReader(consumer, list(partitions), timeout_s=30)]
    finally:
        consumer.close()


@pytest.mark.timeout(600)
def test_a_sim_10_worker_reports_about_100_items_per_s_while_a_job_runs(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    listing = tmp_path / "items.txt"
    listing.write_text("".join(f"item-{i:05d}\n" for i in range(ITEMS)))
    procs.controller()
    procs.worker("sim:ms=10", name="w10")
    procs.wait_for_group("w10")
    before_job = read_samples(config)
    assert before_job and before_job[0]["worker"] == "w10"
    assert before_job[0]["queue_depth"] == 0 and before_job[0]["models"][0]["items"] == 0
    calibration = before_job[0]["calibration"]
    assert calibration is not None and 80 <= calibration["items_per_s"] <= 120
    assert (calibration["model"], calibration["version"]) == ("sim:ms=10", "sim")
    assert before_job[0]["calibrations"] == [calibration]  # one per served model

    started_ms = int(time.time() * 1000)
    job = Client(config).submit("sim:ms=10", [f"@{listing}"], chunk_size=32)
    status = job.wait(timeout_s=300)
    finished_ms = int(time.time() * 1000)
    assert status.ok_items == ITEMS

    found = [s for s in read_samples(config) if s["worker"] == "w10"]
    assert {s["interval_s"] for s in found} == {2.0}
    # Samples whose whole window lies inside the job: the worker was busy all along.
    busy = [s for s in found
            if started_ms + (WINDOW_S + 2) * 1000 <= s["timestamp"] <= finished_ms - 2000]
    assert len(busy) >= 5, [(s["timestamp"], s["throughput_items_per_s"]) for s in found]
    rates = [s["models"][0]["items_per_s"] for s in busy]
    assert 80 <= statistics.median(rates) <= 120, rates
    assert all(s["calibration"] == calibration for s in found)
    assert all(s["calibrations"] == [calibration] for s in found)
    assert any(s["consumer_lag"] for s in busy)  # tasks waited on its partitions
    assert all(s["assigned_partitions"] == [0, 1, 2, 3] for s in busy)
