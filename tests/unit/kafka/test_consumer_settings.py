"""Every librdkafka consumer of inferstream's (the controller's, the readers behind submit
--wait, results and the job followers) gives a broker that does not answer up after Java's
consumer's 30 s, not librdkafka's 60 s: a consumer of a partition whose leader hung read
nothing for 70 s, though the cluster had moved the leadership after 5 s."""

from __future__ import annotations

from inferstream.kafka.reader import reader_consumer
from inferstream.kafka.settings import consumer_config
from tests.unit.kafka.test_reader import Recording
from tests.unit.support.memory import make_config

LIBRDKAFKA_DEFAULT_MS = 60_000


def test_a_group_consumer_gives_up_on_a_silent_broker_sooner_than_librdkafka_would() -> None:
    conf = consumer_config(make_config(), "inferstream.controllers")
    assert int(conf["socket.timeout.ms"]) == 30_000 < LIBRDKAFKA_DEFAULT_MS


def test_a_following_reader_does_too_and_its_fetch_waits_well_under_it() -> None:
    clients = Recording()
    reader_consumer(make_config(), clients, follow=True)  # type: ignore[arg-type]
    assert int(clients.asked["socket.timeout.ms"]) == 30_000
    assert int(clients.asked["fetch.wait.max.ms"]) <= 30_000 - 1000


def test_the_operators_own_socket_timeout_wins() -> None:
    config = make_config(kafka_config=(("socket.timeout.ms", "90000"),))
    assert consumer_config(config, None)["socket.timeout.ms"] == "90000"
