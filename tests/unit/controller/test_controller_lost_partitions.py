"""A controller replica that the group expired (paused, stalled or cut off past its session
timeout: a zombie woken up) says so in one line, drops its partitions and rejoins; what it
logs of the jobs it rebuilds counts the active ones apart."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from inferstream.client.client import Client, Job
from inferstream.controller.replica import Controller
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.pool import Responder
from tests.unit.support.records import assert_completed_exactly, settled
from tests.unit.support.running import Running

MakeController = Callable[..., Controller]
MakeResponder = Callable[..., Responder]
REPLICA = "inferstream.controller.replica"


def submit(clients: MemoryKafkaClients, items: int, chunk_size: int = 2) -> Job:
    names = [f"item-{i:02d}" for i in range(items)]
    return Client(make_config(), CODEC, clients).submit(MODEL, names, chunk_size=chunk_size)


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == REPLICA and text in r.getMessage()]


def test_a_replica_the_group_expired_says_so_in_one_line_and_rejoins(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running,
        caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka hands a member that the group expired its lost partitions through
    `on_lost`; the replica logged nothing of it (only its next "owning" line, as after any
    rebalance), so an operator could not tell a zombie that woke up from a routine
    rebalance."""
    caplog.set_level(logging.INFO, logger=REPLICA)
    config = make_config()
    job = submit(clients, items=6)
    responder = make_responder(pause_after=1)
    controller = running.controller(make_controller(config))
    running.wait_for(responder.paused.is_set)
    group = config.controller_group()
    (member,) = clients.broker.members(group)
    clients.broker.expire_member(group, member)
    running.wait_for(lambda: len(lines(caplog, "owning job partitions=[0, 1]")) == 2)
    responder.resume.set()
    running.until(settled(clients.broker, config))

    (lost,) = lines(caplog, "lost job partitions=")
    assert lost.startswith("lost job partitions=[0, 1]: ")
    assert f"session timeout ({config.controller.session_timeout_ms} ms" in lost
    assert controller.producers.owned == set()  # stopped
    assert_completed_exactly(clients.broker, config, job, items=6, tasks=3)


def test_the_owning_line_counts_the_active_jobs_apart_from_the_finished_ones(
        clients: MemoryKafkaClients, make_controller: MakeController,
        make_responder: MakeResponder, running: Running,
        caplog: pytest.LogCaptureFixture) -> None:
    """A replica keeps a finished job for `retain_finished_s`; its "active jobs rebuilt=1"
    after a takeover of nothing but finished jobs sent an operator looking for a job that
    was not running."""
    caplog.set_level(logging.INFO, logger=REPLICA)
    config = make_config()
    job = submit(clients, items=4)
    make_responder()
    running.controller(make_controller(config))
    running.until(settled(clients.broker, config))
    assert_completed_exactly(clients.broker, config, job, items=4, tasks=2)
    caplog.clear()

    running.controller(make_controller(config))
    running.until(lambda: lines(caplog, "owning job partitions="))
    (owning,) = lines(caplog, "owning job partitions=")
    assert "jobs rebuilt=1 active=0 " in owning
