"""The Python SDK as docs/cli.md describes it, on the in-memory transport: what `submit`
refuses before sending anything (a job id used before or not well-formed, one string for the
inputs, an option of the wrong type, an inline file that cannot be read), `wait` on an id no
job has, a cancel of an id no job has, a cluster that does not answer, and `close()` or a
`with` block."""

from __future__ import annotations

import os
import socket
import weakref
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from inferstream.client import client as client_module
from inferstream.client import submitted
from inferstream.client.client import SUBMITTED, Client
from inferstream.client.listing import recent_jobs
from inferstream.config import Config
from inferstream.jobs.errors import (
    InputError,
    InvalidJobError,
    JobNotDeliveredError,
    JobTimeoutError,
    UnknownJobError,
)
from inferstream.kafka.clients import SyncProducer
from inferstream.kafka.errors import KafkaSetupError, PartitionReadError
from inferstream.schemas.records import Job, read_record
from inferstream.testing import MemoryKafkaClients
from inferstream.testing.clients.sync_producer import MemoryProducer
from tests.unit.support.memory import CODEC, MODEL, make_config


@pytest.fixture
def client(clients: MemoryKafkaClients) -> Client:
    return Client(make_config(), CODEC, clients)


def jobs_sent(clients: MemoryKafkaClients) -> list[bytes | None]:
    """The keys of the records on the jobs topic."""
    return [record.key for record in clients.broker.records(make_config().topic("jobs"))]


def one_line(exc: pytest.ExceptionInfo[Exception]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_a_job_id_used_before_is_refused_naming_it(client: Client,
                                                   clients: MemoryKafkaClients) -> None:
    first = client.submit(MODEL, ["photos"], job_id="myjob-1")
    assert first.job_id == "myjob-1"
    with pytest.raises(InvalidJobError) as raised:
        client.submit(MODEL, ["photos/chelsea.png"], job_id="myjob-1")
    assert one_line(raised) == ("job_id must be an id no job was submitted with before "
                                "(leave it out for a new one), got 'myjob-1'")
    assert jobs_sent(clients) == [b"myjob-1"]
    assert client.submit(MODEL, ["photos"], job_id="myjob-2").job_id == "myjob-2"


def test_of_two_clients_submitting_one_id_at_once_the_second_is_refused(
        client: Client, clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both found the id free and sent their job: the controller ran the first and ignored
    the second, whose client waited on the first job and read its results as its own."""
    other, raced = Client(make_config(), CODEC, clients), []
    looked = client_module.job_submitted

    def racing(*args: Any) -> bool:
        free = looked(*args)
        if not raced:  # the other client sends its job between this one's look and its send
            raced.append("myjob-1")
            other.submit(MODEL, ["theirs.png"], job_id="myjob-1")  # it is not refused
        return free

    monkeypatch.setattr(client_module, "job_submitted", racing)
    with pytest.raises(InvalidJobError) as raised:
        client.submit(MODEL, ["mine.png"], job_id="myjob-1")
    assert one_line(raised) == (
        "job_id must be an id no other job was submitted with: another client submitted a "
        "job of this id at the same time, and the controller runs that one (leave it out for "
        "a new one), got 'myjob-1'")
    assert raced and jobs_sent(clients) == [b"myjob-1", b"myjob-1"]


def test_a_jobs_partition_not_read_to_its_end_is_not_taken_for_an_unused_id(
        client: Client, clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    """An id without a time is looked for from the partition's start (inline jobs of up to
    16 MiB each): a read cut short by its timeout said "not submitted", and the reused id
    went through."""
    client.submit(MODEL, ["photos"], job_id="myjob-1")
    monkeypatch.setattr(submitted, "READ_S", 0.0)
    with pytest.raises(PartitionReadError, match=r"cannot tell whether job myjob-1 was "
                       r"submitted: partition [0-9]+ of t\.jobs was not read to its end"):
        client.submit(MODEL, ["photos/chelsea.png"], job_id="myjob-1")
    assert jobs_sent(clients) == [b"myjob-1"]


@pytest.mark.parametrize("job_id", ["a b/c\n", "", "a/b", "tab\there", "x" * 129, "é"])
def test_a_job_id_outside_the_documented_charset_is_refused(
        client: Client, clients: MemoryKafkaClients, job_id: str) -> None:
    with pytest.raises(InvalidJobError) as raised:
        client.submit(MODEL, ["photos"], job_id=job_id)
    assert one_line(raised).startswith(
        "job_id must be 1 to 128 letters, digits, '.', '_', ':' or '-', got ")
    assert jobs_sent(clients) == []


def test_one_string_of_inputs_is_refused_not_split_into_characters(
        client: Client, clients: MemoryKafkaClients) -> None:
    with pytest.raises(InvalidJobError) as raised:
        client.submit(MODEL, "photos")  # type: ignore[arg-type]
    assert one_line(raised) == ("inputs must be a list of paths (str or pathlib.Path) or URIs "
                                "(for one, a list of one), got 'photos'")
    assert jobs_sent(clients) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"priority": 1.5}, "priority must be an integer, got 1.5"),
    ({"priority": "high"}, "priority must be an integer, got 'high'"),
    ({"priority": 2**31}, "priority must be an integer from -2147483648 to 2147483647, got "),
    ({"weight": "2"}, "weight must be a positive number, got '2'"),
    ({"top_k": "5"}, "top_k must be an integer, got '5'"),
    ({"chunk_size": 2.0}, "chunk_size must be an integer, got 2.0"),
    ({"chunk_size": 10**11}, "chunk_size must be an integer from 1 to 2147483647, got "),
    ({"chunk_size": 0}, "chunk_size must be >= 1, got 0"),
    ({"model": None}, "model must be a model's name, NAME or NAME:VERSION, got None"),
    ({"model": ""}, "model must be a model's name"),
    ({"inputs": None}, "inputs must be a list of paths (str or pathlib.Path) or URIs"),
    ({"inputs": [b"/tmp"]}, "inputs must be a list of paths (str or pathlib.Path) or URIs"),
    ({"pool": "no such/pool"}, "pool must be a pool's name: letters, digits, '.', '_', '-'"),
    ({"output_path": 5}, "output_path must be a path (a str or pathlib.Path), got 5"),
])
def test_an_option_of_the_wrong_type_is_refused_naming_it(
        client: Client, clients: MemoryKafkaClients, options: dict[str, Any],
        message: str) -> None:
    with pytest.raises(InvalidJobError) as raised:
        client.submit(**{"model": MODEL, "inputs": ["photos"], **options})
    assert one_line(raised).startswith(message)
    assert raised.value.option == next(iter(options))
    assert jobs_sent(clients) == []


def test_an_inline_file_that_cannot_be_read_is_an_input_error_naming_it(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path) -> None:
    missing = tmp_path / "missing.png"
    with pytest.raises(InputError) as raised:
        client.submit(MODEL, [str(missing)], inline=True)
    assert one_line(raised) == f"cannot read {missing}: No such file or directory"
    assert jobs_sent(clients) == []


def test_wait_on_a_job_submitted_but_not_yet_accepted_waits(client: Client) -> None:
    """The check is on the job's record, which is there before any event."""
    job = client.submit(MODEL, ["photos"])
    for waited in (job, client.job(job.job_id)):
        with pytest.raises(JobTimeoutError, match="it goes on") as raised:
            waited.wait(timeout_s=0.05)
        # what the other Job*Errors carry: the job, and how far it was
        assert (raised.value.job_id, raised.value.timeout_s) == (job.job_id, 0.05)
        assert (raised.value.state, raised.value.done_items) == ("SUBMITTED", 0)
    for wrong in ("1", 0, -1.0, float("nan"), True):  # a TypeError from deep inside, or none
        with pytest.raises(InvalidJobError, match="timeout_s must be a positive number"):
            job.wait(timeout_s=wrong)  # type: ignore[arg-type]


def test_a_cancel_of_an_id_no_job_has_leaves_the_id_naming_no_job(
        client: Client, clients: MemoryKafkaClients) -> None:
    """The cancel goes to the jobs topic keyed by the id, and any record of that key was
    taken for the job: the id then showed as a job submitted and never accepted (in
    `status` too), and a job submitted with it was refused as a reuse."""
    client.job("typo-1").cancel()
    assert jobs_sent(clients) == [b"typo-1"]
    with pytest.raises(UnknownJobError):
        client.job("typo-1").progress()
    assert recent_jobs(make_config(), CODEC, clients=clients) == []
    assert client.submit(MODEL, ["photos"], job_id="typo-1").progress().state == SUBMITTED
    assert [s.job_id for s in recent_jobs(make_config(), CODEC, clients=clients)] == ["typo-1"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("call", ["submit", "progress", "wait"])
def test_no_broker_is_the_commands_one_line_error_within_the_connect_timeout(
        call: str) -> None:
    """librdkafka on a loopback port nothing listens on: the SDK asked for 30 s and raised
    its KafkaException."""
    address = f"127.0.0.1:{free_port()}"
    client = Client(Config(bootstrap_servers=address, connect_timeout_s=0.2))
    with pytest.raises(KafkaSetupError) as raised:
        if call == "submit":
            client.submit("sim:ms=20", ["photos"])
        elif call == "progress":
            client.job("20990101-000000-deadbeef").progress()
        else:
            client.job("20990101-000000-deadbeef").wait(timeout_s=5)
    assert one_line(raised).startswith(f"no Kafka broker answered at {address} within 0.2s")


class _Producers(MemoryKafkaClients):
    """Keeps no producer alive itself: `alive` counts those someone still holds."""

    def __init__(self, clients: MemoryKafkaClients) -> None:
        super().__init__(clients.broker)
        self._made: list[weakref.ref[MemoryProducer]] = []

    def producer(self, settings: dict[str, Any]) -> SyncProducer:
        producer = MemoryProducer(self.broker, settings)
        self._made.append(weakref.ref(producer))
        return producer

    def alive(self) -> int:
        return sum(ref() is not None for ref in self._made)


def test_close_and_a_with_block_let_go_of_the_producer_and_a_later_call_opens_one(
        clients: MemoryKafkaClients) -> None:
    producers = _Producers(clients)
    with Client(make_config(), CODEC, producers) as client:
        job = client.submit(MODEL, ["photos"])
        assert producers.alive() == 1
    assert producers.alive() == 0
    job.cancel()  # a job of a closed client opens what it needs again
    assert producers.alive() == 1
    client.close()
    client.close()
    assert producers.alive() == 0
    assert len(jobs_sent(clients)) == 2


def _unreachable(*args: Any, **kwargs: Any) -> Any:
    """A producer's metadata call that no broker answers, in librdkafka's words."""
    raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connect to ipv4#127.0.0.1:1 "
                                    "failed: Connection refused"))


def test_a_producer_that_reached_no_broker_is_let_go_with_the_error(
        clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept, it went on trying to connect, and the client's close() printed every failed
    try that librdkafka had logged meanwhile, after the one-line KafkaSetupError."""
    producers = _Producers(clients)
    client = Client(make_config(), CODEC, producers)
    monkeypatch.setattr(MemoryProducer, "list_topics", _unreachable)
    with pytest.raises(KafkaSetupError, match="no Kafka broker answered"):
        client.submit(MODEL, ["photos"])
    assert producers.alive() == 0
    monkeypatch.undo()
    assert client.submit(MODEL, ["photos"]).progress().state == SUBMITTED


class _ClosedWhileSending(MemoryKafkaClients):
    """Producers during whose `produce` another thread closes `client`."""

    client: Client

    def producer(self, settings: dict[str, Any]) -> SyncProducer:
        producer = MemoryProducer(self.broker, settings)
        produce = producer.produce

        def and_close(*args: Any, **kwargs: Any) -> None:
            produce(*args, **kwargs)
            self.client.close()
        producer.produce = and_close  # type: ignore[method-assign]
        return producer


def test_a_close_in_another_thread_while_a_job_is_sent_lets_the_send_finish(
        clients: MemoryKafkaClients) -> None:
    """The send read the client's producer again after the close had let go of it: an
    AttributeError on None, with the job on its way or not."""
    closing = _ClosedWhileSending(clients.broker)
    closing.client = Client(make_config(), CODEC, closing)
    job = closing.client.submit(MODEL, ["photos"])
    job.cancel()
    assert jobs_sent(clients) == [job.job_id.encode()] * 2


def test_numpy_numbers_pass_as_python_numbers_do(client: Client,
                                                 clients: MemoryKafkaClients) -> None:
    np = pytest.importorskip("numpy")
    client.submit(MODEL, ["photos"], top_k=np.int64(3), priority=np.int32(2),
                  weight=np.float32(0.5))
    assert len(jobs_sent(clients)) == 1  # the first job alone


@pytest.mark.parametrize("job_id", [None, "", 5])
def test_a_job_of_no_id_is_refused_when_asked_for(client: Client, job_id: Any) -> None:
    with pytest.raises(InvalidJobError, match="job_id must be a job's id"):
        client.job(job_id)


def test_an_inline_folder_takes_linked_subfolders_once_and_refuses_an_unreadable_one(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`os.walk` skipped both in silence: a job of fewer items than the folder holds."""
    photos, elsewhere = tmp_path / "photos", tmp_path / "elsewhere"
    (photos / "a").mkdir(parents=True)
    elsewhere.mkdir()
    (photos / "a" / "1.png").write_bytes(b"1")
    (elsewhere / "2.png").write_bytes(b"2")
    (photos / "linked").symlink_to(elsewhere)
    (photos / "a" / "up").symlink_to(photos)  # a loop: walked once
    client.submit(MODEL, [str(photos)], inline=True)
    (record,) = clients.broker.records(make_config().topic("jobs"))
    sent = read_record(CODEC, record.value, Job)
    assert [item["name"] for item in sent["inline_items"]] == [
        str(photos / "a" / "1.png"), str(photos / "linked" / "2.png")]

    walk_into = os.scandir

    def unreadable(path: Any = ".") -> Any:
        if str(path).endswith("linked"):
            raise PermissionError(13, "Permission denied", str(path))
        return walk_into(path)

    monkeypatch.setattr(os, "scandir", unreadable)  # root reads any folder
    with pytest.raises(InputError) as raised:
        client.submit(MODEL, [str(photos)], inline=True)
    assert one_line(raised) == f"cannot read {photos / 'linked'}: Permission denied"
    assert len(jobs_sent(clients)) == 1  # the first job alone


def test_a_submission_the_cluster_refuses_is_not_a_failed_job(
        client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """JobFailedError is a job that failed after it was accepted; a record that never
    reached the cluster is JobNotDeliveredError, saying what was not sent."""
    from confluent_kafka import KafkaError

    producer = client.clients.producer({})
    real = producer.produce

    def refused(*args: Any, on_delivery: Any = None, **kwargs: Any) -> None:
        real(*args, **kwargs)
        on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
    monkeypatch.setattr(producer, "produce", refused)
    monkeypatch.setattr(client.clients, "producer", lambda _settings: producer)
    with pytest.raises(JobNotDeliveredError) as raised:
        client.submit(MODEL, ["photos"], job_id="20261207-100000-0000dead")
    assert raised.value.job_id == "20261207-100000-0000dead"
    assert str(raised.value).startswith("the submission of job 20261207-100000-0000dead was "
                                        "not delivered (")
    assert str(raised.value).endswith("): nothing was sent")
    with pytest.raises(JobNotDeliveredError, match="the cancel of job"):
        client.job("20261207-100000-0000dead").cancel()
