"""The client's commands run as `inferstream ARGS...` on the in-memory broker."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from inferstream.cli import main
from inferstream.client import client as client_module
from inferstream.client.client import Client
from inferstream.kafka import preflight
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC

CONNECTION = ["--topic-prefix", "t.", "--partitions", "2"]
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(clients: MemoryKafkaClients, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> Cli:
    """`inferstream ARGS...` on the in-memory broker: (exit code, stdout, stderr)."""
    monkeypatch.setattr(client_module, "Client",
                        functools.partial(Client, codec=CODEC, clients=clients))
    check_cluster = preflight.check_cluster  # the start-up check asks the same broker
    monkeypatch.setattr(preflight, "check_cluster",
                        lambda config, topics=(), _=None, user_topics=(), role=None:
                        check_cluster(config, topics, clients, user_topics, role))

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, *CONNECTION])
        out, err = capsys.readouterr()
        return code, out, err
    return run
