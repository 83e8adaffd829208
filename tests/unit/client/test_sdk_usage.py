"""The Python SDK as a data scientist meets it: arguments of the wrong kind (a numpy array, a
generator, a long list with one wrong entry, an address instead of a Config) refused in one
short line, librdkafka's retries kept off the stderr of a script that set up no logging, a
`Job` that shows what it is, and every error docs/cli.md tells a caller to catch importable
from `inferstream.client`."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

import inferstream.client
from inferstream.client.client import Client
from inferstream.errors import ConfigError, InferstreamError
from inferstream.jobs.errors import InvalidJobError
from inferstream.kafka.settings import LIBRDKAFKA_LOG
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, MODEL, make_config


@pytest.fixture
def client(clients: MemoryKafkaClients) -> Client:
    return Client(make_config(), CODEC, clients)


class Array:
    """What a numpy array's repr looks like: many lines."""

    def __repr__(self) -> str:
        return "array([[0, 0, 0],\n       [0, 0, 0]],\n      dtype=uint8)" + " " * 500


@pytest.mark.parametrize(("inputs", "shown"), [
    ([f"photos/{i}.png" for i in range(100_000)] + [None],
     "got inputs[100000] = None"),
    (["photos/a.png", Array()],
     "got inputs[1] = array([[0, 0, 0], [0, 0, 0]], dtype=uint8)"),
    ((str(path) for path in [Path("a.png")]),
     "got <generator object"),
])
def test_inputs_of_the_wrong_kind_are_refused_in_one_short_line_naming_the_entry(
        client: Client, inputs: object, shown: str) -> None:
    """The message held the whole list (megabytes for 100,000 paths), or a numpy array's
    repr over many lines."""
    with pytest.raises(InvalidJobError) as raised:
        client.submit(MODEL, inputs)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "\n" not in message
    assert len(message) < 400
    assert message.startswith("inputs must be a list of paths (str or pathlib.Path) or URIs "
                              "(for one, a list of one), " + shown)
    assert raised.value.option == "inputs"
    assert raised.value.value is inputs


def test_a_generator_of_inputs_is_told_to_be_made_a_list(client: Client) -> None:
    with pytest.raises(InvalidJobError, match=r"\(an iterator: pass a list of it, "
                                              r"list\(\.\.\.\)\)$"):
        client.submit(MODEL, iter(["a.png"]))  # type: ignore[arg-type]


def test_client_of_something_else_than_a_config_is_a_config_error() -> None:
    """An address, or None, failed deep inside: 'str' object has no attribute
    'schema_registry_url'."""
    for wrong in ("localhost:9092", None):
        with pytest.raises(ConfigError) as raised:
            Client(wrong)  # type: ignore[arg-type]
        assert str(raised.value) == (
            "Client needs a Config, as inferstream.config.load_config() makes (the "
            f"environment, a file or flags), got {wrong!r}")


def test_librdkafka_lines_are_not_printed_where_no_logging_is_set_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that set up no logging printed each of librdkafka's connection retries to
    stderr through Python's last-resort handler; inferstream's own lines still show."""
    heard: list[str] = []

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(record.getMessage())

    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # no logging set up
    monkeypatch.setattr(logging, "lastResort", Heard())
    LIBRDKAFKA_LOG.error("FAIL [rdkafka#consumer-1] Connect to ipv4#127.0.0.1:1 failed")
    logging.getLogger("inferstream.client.client").error("an own line")
    assert heard == ["an own line"]


def test_a_job_shows_its_id_pool_and_model(client: Client) -> None:
    job = client.submit(MODEL, ["photos"])
    assert repr(job) == f"Job(job_id={job.job_id!r}, pool='default', model='sim:ms=0')"


def test_every_error_the_docs_tell_a_caller_to_catch_is_importable_from_the_client() -> None:
    """They were in three modules of their own, which the docs did not name."""
    sdk = (Path(__file__).parents[3] / "docs" / "cli.md").read_text().split(
        "## The Python SDK")[1]
    named = set(re.findall(r"`([A-Z][A-Za-z]*Error)`", sdk))
    assert {"JobFailedError", "KafkaSetupError", "InvalidJobError"} <= named
    assert named <= set(inferstream.client.__all__)
    for name in inferstream.client.__all__:
        exported = getattr(inferstream.client, name)
        assert exported.__name__ == name
        if name.endswith("Error"):
            assert issubclass(exported, InferstreamError)


def test_ctrl_c_in_wait_ends_the_wait_not_the_job_and_closes_what_it_read_with(
        client: Client, clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch) -> None:
    """As docs/cli.md says: nothing is sent (no cancel), and no consumer is left open."""
    opened: list[Any] = []
    consumer = clients.consumer

    def recorded(conf: dict[str, Any]) -> Any:
        opened.append(consumer(conf))
        return opened[-1]

    monkeypatch.setattr(clients, "consumer", recorded)
    job = client.submit(MODEL, ["photos"])

    def interrupted(_line: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        job.wait(on_notice=interrupted, quiet_s=0.0)
    assert opened and all(each._closed for each in opened)
    assert [record.key for record in clients.broker.records(make_config().topic("jobs"))] == [
        job.job_id.encode()]
