"""A job's output written while it runs (`OutputFollower`, `submit --wait --output`): the
tasks whose predecessors are all in are written before the job completes, the file ends as
`results` writes it (first result of each task, task order), and a job given up leaves no file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Message

from inferstream.client.client import Client
from inferstream.jobs import output
from inferstream.jobs.errors import OutputIncompleteError
from inferstream.jobs.follow import NICE, OutputFollower
from inferstream.jobs.ids import new_job_id
from inferstream.jobs.output import keep_result
from inferstream.jobs.spool import ResultSpool
from inferstream.kafka.errors import PartitionReadError
from inferstream.kafka.reader import PartitionReader
from inferstream.schemas.records import JobEventType
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.records import put_event, put_results, result_item_name

CHUNK = 3


def _wait_for_lines(follower: OutputFollower, lines: int) -> None:
    """Until the follower wrote `lines` lines (it runs on a thread of its own)."""
    deadline = time.monotonic() + 30
    while follower.lines < lines:
        assert time.monotonic() < deadline, f"{follower.lines} lines written, not {lines}"
        time.sleep(0.01)


def _names(path: Path) -> list[str]:
    return [json.loads(line)["item"] for line in path.read_text().splitlines()]


def _items(count: int) -> list[str]:
    """The names of the first `count` items `put_results` writes."""
    return [result_item_name(i) for i in range(count)]


def _following(clients: MemoryKafkaClients, job_id: str, path: Path) -> OutputFollower:
    """A follower of the output of `job_id` to `path`, reading already."""
    follower = OutputFollower(make_config(), job_id, str(path), CODEC, clients)
    follower.start()
    return follower


def _broken(*_args: object, **_kwargs: object) -> None:
    """In place of `keep_result`: the follower's reading fails otherwise than by a read."""
    raise RuntimeError("a bug")


def test_tasks_are_written_as_soon_as_every_task_before_them_is_in(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=6, chunk=CHUNK, order=[1, 0, 3])
    with _following(clients, job_id, path) as follower:
        _wait_for_lines(follower, 2 * CHUNK)  # tasks 0 and 1; 3 waits for 2
        assert not path.exists()
        put_results(clients, config, job_id, tasks=6, chunk=CHUNK, order=[0, 5, 2, 4],
                    worker="late")
        put_results(clients, config, job_id, tasks=6, chunk=CHUNK, order=[2], worker="later")
        assert follower.finish(6) == 6 * CHUNK
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=6, chunk=CHUNK)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == list(Client(config, CODEC, clients).job(job_id).results())
    assert [line["item"] for line in lines] == _items(6 * CHUNK)
    assert [line["worker"] for line in lines[::CHUNK]] == ["w1", "w1", "late", "w1", "late",
                                                          "late"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_task_whose_result_comes_last_holds_back_only_the_tasks_after_it(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=4, chunk=CHUNK, order=[0, 2, 3])
    with _following(clients, job_id, path) as follower:
        _wait_for_lines(follower, CHUNK)
        put_results(clients, config, job_id, tasks=4, chunk=CHUNK, order=[1])
        assert follower.finish(4) == 4 * CHUNK
    assert _names(path) == _items(4 * CHUNK)


def test_a_follower_left_before_the_job_completed_leaves_no_file(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=3, chunk=CHUNK)
    with _following(clients, job_id, path) as follower:
        _wait_for_lines(follower, 3 * CHUNK)
    assert list(tmp_path.iterdir()) == []


def test_finish_without_start_or_a_known_total_reads_the_partition(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    """A controller that did not say the total: the partition is read to its end."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=2, chunk=CHUNK, order=[1, 0])
    for total in (2, None):
        path = tmp_path / f"out-{total}.jsonl"
        with OutputFollower(config, job_id, str(path), CODEC, clients) as follower:
            assert follower.finish(total) == 2 * CHUNK
        assert _names(path) == _items(2 * CHUNK)


def test_a_reading_that_failed_during_the_job_is_done_again_by_finish(
        clients: MemoryKafkaClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=2, chunk=CHUNK)
    monkeypatch.setattr("inferstream.jobs.follow.keep_result", _broken)
    with _following(clients, job_id, path) as follower:
        assert follower.finish(2) == follower.finish(2) == 2 * CHUNK
    assert _names(path) == _items(2 * CHUNK)
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_a_reading_done_again_that_misses_a_task_is_an_error_and_leaves_no_file(
        clients: MemoryKafkaClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=3, chunk=CHUNK, order=[0, 2])
    monkeypatch.setattr("inferstream.jobs.follow.keep_result", _broken)
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 0.3)
    with _following(clients, job_id, path) as follower:
        with pytest.raises(OutputIncompleteError, match="results of 1 of its 3 tasks"):
            follower.finish(3)
    assert list(tmp_path.iterdir()) == []


def test_a_task_whose_result_is_not_read_in_time_is_an_error_and_leaves_no_file(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=3, chunk=CHUNK, order=[0, 2])
    with _following(clients, job_id, path) as follower:
        with pytest.raises(OutputIncompleteError, match=f"results of [123] of its 3 tasks .*"
                           f"`inferstream results {job_id} --output FILE`"):
            follower.finish(3, timeout_s=0.3)
    assert list(tmp_path.iterdir()) == []


def test_finish_twice_gives_the_same_count_and_after_close_is_a_mistake(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=1, chunk=CHUNK)
    with OutputFollower(config, job_id, str(tmp_path / "a.jsonl"), CODEC, clients) as follower:
        assert follower.finish(1) == follower.finish(1) == CHUNK
    follower = OutputFollower(config, job_id, str(tmp_path / "b.jsonl"), CODEC, clients)
    follower.close()
    with pytest.raises(RuntimeError, match="after close"):
        follower.finish(1)
    assert [p.name for p in tmp_path.iterdir()] == ["a.jsonl"]


def test_the_spool_hands_out_tasks_in_order_once_each(clients: MemoryKafkaClients) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=4, chunk=1)
    values = {CODEC.decode_head(value, "TaskResult", ("job_id", "task_id"))["task_id"]: value
              for value in clients.broker.values(config.topic("results"))}
    with ResultSpool(CODEC) as spool:
        assert spool.add(1, values[1]) and not list(spool.ready())
        assert spool.add(0, values[0])
        assert [r["task_id"] for r in spool.ready()] == [0, 1]
        assert not spool.add(0, values[0]) and not spool.add(1, values[1])
        assert spool.add(3, values[3]) and len(spool) == 3
        assert [r["task_id"] for r in spool.in_task_order()] == [3]


class _FailingReader(PartitionReader):
    """A reader whose first `failures` reads end in a read error, as a broker's death does."""

    failures = 0

    def messages(self) -> Iterator[Message]:
        if _FailingReader.failures > 0:
            _FailingReader.failures -= 1
            raise PartitionReadError("read of t.results failed: the broker went away")
        return super().messages()


@pytest.mark.parametrize("failures", [3, 10**9])
def test_a_read_error_is_read_past_up_to_finishs_deadline(
        clients: MemoryKafkaClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        failures: int) -> None:
    config, job_id, path = make_config(), new_job_id(), tmp_path / "out.jsonl"
    put_results(clients, config, job_id, tasks=2, chunk=CHUNK)
    monkeypatch.setattr("inferstream.jobs.follow.PartitionReader", _FailingReader)
    monkeypatch.setattr("inferstream.jobs.follow.RETRY_S", 0.01)
    monkeypatch.setattr(_FailingReader, "failures", failures)
    with _following(clients, job_id, path) as follower:
        if failures < 10:
            _wait_for_lines(follower, 2 * CHUNK)  # read on during the job
            assert follower.finish(2) == 2 * CHUNK
            assert _names(path) == _items(2 * CHUNK)
            return
        with pytest.raises(OutputIncompleteError, match=r"the last read error: .*went away"):
            follower.finish(2, timeout_s=0.3)  # read past until the deadline
    assert list(tmp_path.iterdir()) == []


def test_the_reading_thread_runs_below_its_process_priority(
        clients: MemoryKafkaClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host shared with the job's worker, the output takes the cores the job leaves."""
    seen: list[int] = []

    def keep(spool: ResultSpool, job_id: str, value: bytes) -> None:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        keep_result(spool, job_id, value)
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=1, chunk=CHUNK)
    monkeypatch.setattr("inferstream.jobs.follow.keep_result", keep)
    with _following(clients, job_id, tmp_path / "out.jsonl") as follower:
        assert follower.finish(1) == CHUNK
    assert seen == [os.getpriority(os.PRIO_PROCESS, 0) + NICE]
