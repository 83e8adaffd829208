"""Issue 12, points 1-2 on the real broker: controller replicas share the job partitions with
no flag and no fencing, and a replica killed -9 mid-job is replaced within its session
timeout: the job completes exactly once, its counts equal to its output."""

from __future__ import annotations

import json
import os
import random
import re
import socket
import time
import zlib
from pathlib import Path
from subprocess import Popen

import pytest
from confluent_kafka import Producer

from inferstream.client.client import Client, Job
from inferstream.config import Config
from inferstream.jobs.ids import new_job_id
from inferstream.kafka.settings import partition_for
from inferstream.schemas import Codec
from inferstream.schemas.records import Job as JobRecord
from tests.integration.conftest import Processes

pytestmark = pytest.mark.integration

#: The controller group's default session timeout (ControllerConfig.session_timeout_ms).
SESSION_S = 6.0


def owned(procs: Processes, name: str) -> set[int]:
    """The job partitions controller `name` said it owns last."""
    lines = [line for line in procs.log(name).splitlines() if "owning job partitions=" in line]
    if not lines:
        return set()
    listed = lines[-1].split("owning job partitions=")[1].split("]")[0].strip("[ ")
    return {int(p) for p in listed.split(",") if p.strip()}


def wait_until(what: str, check: object, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def shared(procs: Processes, config: Config, *names: str) -> bool:
    """Whether the replicas `names` own every job partition between them, each some."""
    sets = [owned(procs, n) for n in names]
    return all(sets) and sorted(p for s in sets for p in s) == list(range(config.partitions))


def listing(tmp_path: Path, name: str, count: int) -> tuple[Path, list[str]]:
    path = tmp_path / f"{name}.txt"
    names = [f"{name}-{i:05d}" for i in range(count)]
    path.write_text("\n".join(names) + "\n")
    return path, names


def lines_of(config: Config, job: Job) -> list[dict[str, object]]:
    return list(Client(config).job(job.job_id).results())


def job_id_on(partition: int, partitions: int) -> str:
    """A new job id whose home is `partition` (with six random ids, one replica had no job
    in about 1 run of 32)."""
    while True:
        job_id = new_job_id()
        if partition_for(job_id, partitions) == partition:
            return job_id


def start_replica(procs: Processes, replicas: dict[str, Popen[bytes]]) -> None:
    name = f"controller-{len(procs.started)}"  # the name procs.controller gives it
    replicas[name] = procs.controller()


@pytest.mark.timeout(600)
def test_two_replicas_share_the_job_partitions_without_fencing(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    procs.controller()
    procs.controller()
    procs.worker("sim:ms=1", name="worker-1")
    wait_until("both replicas owning partitions", lambda: shared(
        procs, config, "controller-0", "controller-1"))
    client = Client(config)
    jobs = []
    for n in range(6):  # on every partition, so both replicas run some
        path, names = listing(tmp_path, f"job{n}", 40)
        job_id = job_id_on(n % config.partitions, config.partitions)
        jobs.append((client.submit("sim:ms=1", [f"@{path}"], chunk_size=8, job_id=job_id),
                     names))
    homes = {partition_for(job.job_id, config.partitions) for job, _ in jobs}
    for job, names in jobs:
        status = job.wait(timeout_s=120)
        assert (status.total_items, status.ok_items) == (len(names), len(names))
        assert sorted(str(line["item"]) for line in lines_of(config, job)) == names
    assert {p for p in homes if p in owned(procs, "controller-0")} and {
        p for p in homes if p in owned(procs, "controller-1")}, "one replica ran every job"
    for name in ("controller-0", "controller-1"):
        log = procs.log(name).lower()
        assert "fenc" not in log and "rolling back" not in log and "took it over" not in log, (
            procs.log(name))


@pytest.mark.timeout(900)
def test_the_owning_replica_killed_mid_job_is_replaced_within_its_session(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    """kill -9 the replica that owns the job, three times (at 10 %, then a random 1-3 s
    after progress resumed); a fresh replica starts each time. Progress (an event written
    after the kill with more items done) resumes within the session timeout plus a few
    seconds, and the job ends with every item once and counts equal to the output."""
    rng = random.Random(12)
    replicas: dict[str, Popen[bytes]] = {}
    for _ in range(2):
        start_replica(procs, replicas)
    procs.worker("sim:ms=10", name="worker-1")
    procs.worker("sim:ms=10", name="worker-2")
    procs.wait_for_group("worker-1", "worker-2")
    wait_until("both replicas owning partitions", lambda: shared(procs, config, *replicas))
    path, names = listing(tmp_path, "job", 8000)
    job = Client(config).submit("sim:ms=10", [f"@{path}"], chunk_size=10)
    home = partition_for(job.job_id, config.partitions)
    for status in job.events(timeout_s=300):  # the first kill at 10 %
        if status.done_items >= len(names) // 10:
            break
    resumed_after = []
    for _ in range(3):  # the next ones a random 1-3 s after progress resumed
        wait_until("a replica owning the job's partition", lambda: any(
            home in owned(procs, n) for n in replicas))
        owner = next(n for n in replicas if home in owned(procs, n))
        replicas.pop(owner).kill()  # SIGKILL
        killed, killed_ms, done_then = time.monotonic(), time.time() * 1000, status.done_items
        start_replica(procs, replicas)
        for status in job.events(timeout_s=300):
            done_then = max(done_then, status.done_items * (status.updated_at_ms < killed_ms))
            if status.updated_at_ms >= killed_ms and (status.done_items > done_then
                                                      or status.finished):
                break
        assert not status.finished, "the job ended before this kill's takeover was seen"
        resumed_after.append(time.monotonic() - killed)
        time.sleep(rng.uniform(1, 3))
    status = job.wait(timeout_s=600)
    print("progress resumed after", [f"{s:.1f}s" for s in resumed_after],
          f"(session timeout {SESSION_S:g}s)")
    lines = lines_of(config, job)
    assert sorted(str(line["item"]) for line in lines) == names
    ok_lines = sum(1 for line in lines if line["status"] == "ok")
    assert (status.done_items, status.ok_items, status.error_items) == (8000, ok_lines, 0)
    # The figure to meet is session + 2 s (BENCHMARKS.md P7 measures it); a shared host's
    # noise gets room here, a takeover that waits for a transaction timeout (60 s) does not.
    assert max(resumed_after) <= 3 * SESSION_S, resumed_after


def produce_foreign(config: Config, record: JobRecord) -> int:
    """Produce `record` as a foreign client would (confluent-kafka's default partitioner,
    CRC32 of the key); the partition it landed on."""
    landed: list[int] = []
    producer = Producer({"bootstrap.servers": config.bootstrap_servers})
    producer.produce(config.topic("jobs"), Codec().encode("Job", record),
                     record["job_id"].encode(),
                     on_delivery=lambda err, msg: landed.append(-1 if err else msg.partition()))
    assert producer.flush(30) == 0 and landed and landed[0] >= 0, landed
    return landed[0]


@pytest.mark.timeout(600)
def test_a_job_from_a_foreign_partitioner_completes_with_two_replicas(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    """The job lands on a partition owned by one replica while murmur2 of its id is the
    other's: its tasks carry their home partition, so the results go to the replica that
    has the job (before, the job sat at 0/N for ever)."""
    procs.controller()
    procs.controller()
    procs.worker("sim:ms=1", name="worker-1")
    wait_until("both replicas owning partitions", lambda: shared(
        procs, config, "controller-0", "controller-1"))
    path, names = listing(tmp_path, "foreign", 40)
    for _ in range(50):  # a job id whose CRC32 partition belongs to the other replica
        job_id = new_job_id()
        owners = [n for n in ("controller-0", "controller-1")
                  if partition_for(job_id, config.partitions) in owned(procs, n)]
        record = JobRecord(job_id=job_id, model="sim:ms=1", model_version=None, pool=config.pool,
                           top_k=1, chunk_size=8, inputs=[f"@{path}"], inline_items=[],
                           submitted_at=0, submitter="foreign", output_path=None,
                           priority=0, weight=1.0)
        if zlib.crc32(job_id.encode()) % config.partitions not in owned(procs, owners[0]):
            break
    landed = produce_foreign(config, record)
    assert landed not in owned(procs, owners[0]), "the test needs a job on the other replica"
    status = Client(config).job(job_id).wait(timeout_s=120)
    assert (status.total_items, status.ok_items) == (len(names), len(names))
    lines = list(Client(config).job(job_id).results())
    assert sorted(str(line["item"]) for line in lines) == names


def owner_of(procs: Processes, replicas: dict[str, Popen[bytes]], home: int) -> str:
    wait_until("a replica owning the job's partition", lambda: any(
        home in owned(procs, n) for n in replicas))
    return next(n for n in replicas if home in owned(procs, n))


@pytest.mark.timeout(600)
def test_a_replica_killed_between_completed_and_the_output_file_leaves_it_to_the_next(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    """The owner's output writer is held where it opens its temporary file (a FIFO at the
    name that replica's pid gives it, which blocks until read) after COMPLETED is committed;
    the owner is killed -9 there, and the replica that takes the partition writes the file."""
    replicas: dict[str, Popen[bytes]] = {}
    for _ in range(2):
        start_replica(procs, replicas)
    procs.worker("sim:ms=10", name="worker-1")
    procs.wait_for_group("worker-1")
    wait_until("both replicas owning partitions", lambda: shared(procs, config, *replicas))
    path, names = listing(tmp_path, "out", 300)
    output = tmp_path / "results.jsonl"
    job = Client(config).submit("sim:ms=10", [f"@{path}"], chunk_size=10,
                                output_path=str(output))
    owner = owner_of(procs, replicas, partition_for(job.job_id, config.partitions))
    os.mkfifo(f"{output}.tmp-{socket.gethostname()}-{replicas[owner].pid}")  # 300 items: ~3 s
    status = job.wait(timeout_s=120)
    assert status.ok_items == len(names)
    time.sleep(1)  # the writer thread starts in the owner's next round, then blocks
    assert not output.exists()
    killed = replicas.pop(owner)
    killed.kill()  # SIGKILL with COMPLETED committed and no file
    killed.wait()  # reaped, as its parent would: a zombie's pid still answers
    start_replica(procs, replicas)
    wait_until("the output file from the next owner", output.exists, timeout_s=60)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(str(line["item"]) for line in lines) == names
    writers = [n for n in replicas if "output written to" in procs.log(n)]
    assert len(writers) == 1, {n: procs.log(n) for n in replicas}
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []  # the dead one's


@pytest.mark.timeout(600)
def test_a_worker_slowed_8x_mid_job_has_its_overdue_tasks_completed_elsewhere(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    """Three workers with no sysinfo (even shares): one runs 8x slower after its first 100
    items and stays in the group. The controller re-issues its late tasks to the fast ones;
    any result it still commits for a superseded attempt is dropped, so every item is once in
    the output and the counts equal it. (How near the fast workers' time the job ends is
    BENCHMARKS.md P4's figure, measured side by side with migration off.)"""
    procs.controller()
    procs.worker("sim:ms=10", "--sysinfo-interval", "0", name="worker-1")
    procs.worker("sim:ms=10", "--sysinfo-interval", "0", name="worker-2")
    procs.worker("sim:ms=10,slow_after=100,slow_factor=8", "--sysinfo-interval", "0",
                 name="slow")
    procs.wait_for_group("worker-1", "worker-2", "slow")
    path, names = listing(tmp_path, "slowed", 3000)
    job = Client(config).submit("sim:ms=10", [f"@{path}"], chunk_size=10)
    status = job.wait(timeout_s=400)
    log = procs.log("controller-0")
    reissued = sum(1 for line in log.splitlines()
                   if "re-issued as attempt" in line and "declined" not in line)
    dropped = len(re.findall(r"duplicate result dropped", log))
    print(f"tasks re-issued {reissued}, late results dropped {dropped}")
    assert reissued > 0, log
    lines = lines_of(config, job)
    assert sorted(str(line["item"]) for line in lines) == names
    assert (status.done_items, status.ok_items, status.error_items) == (len(names),
                                                                        len(lines), 0)
    assert procs.assigned("slow"), "the slowed worker left the group"
