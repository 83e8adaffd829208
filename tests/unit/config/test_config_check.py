"""`config check` runs every role's start-up checks, and `config check --role ROLE` that role's
alone: a principal with a role's least-privilege ACLs may describe its own topics only, so the
check of every role could never pass for it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferstream.cli import main
from inferstream.client.admin import CHECKED_ROLES
from inferstream.commands import ROLE_NEEDS
from inferstream.kafka import preflight
from inferstream.kafka.preflight import Needs
from tests.unit.support.fake_registry import https_registry
from tests.unit.support.tls import Certificates


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[Needs]:
    """The needs each start-up check is run with (no cluster asked)."""
    seen: list[Needs] = []

    def record(_config: Any, needs: Needs, *_args: Any) -> None:
        seen.append(needs)
    monkeypatch.setattr(preflight, "preflight", record)
    return seen


def test_a_role_s_check_is_its_own_start_up_check(
        checked: list[Needs], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--role", "controller"]) == 0
    (needs,) = checked
    assert needs.role == "controller"
    assert "inferstream.tasks.default" not in needs.topics  # the workers', not its own
    assert "7 topics of the controller role" in capsys.readouterr().out


def test_without_a_role_every_role_s_topics_are_checked(checked: list[Needs]) -> None:
    assert main(["config", "check"]) == 0
    (needs,) = checked
    assert needs.role is None and "inferstream.tasks.default" in needs.topics
    assert "inferstream.controller-ledger" in needs.topics


def test_every_role_of_the_flag_has_its_checks() -> None:
    assert set(ROLE_NEEDS) == set(CHECKED_ROLES)


def test_a_role_s_check_takes_the_flags_its_errors_name(
        checked: list[Needs], capsys: pytest.CaptureFixture[str]) -> None:
    """`config check --role worker` without a model says `the worker needs a model: --model
    NAME`: that flag, and every other of the role's command, is taken there, where it was an
    unrecognized argument."""
    assert main(["config", "check", "--role", "worker"]) == 2
    assert "--model NAME" in capsys.readouterr().err
    assert main(["config", "check", "--role", "worker", "--model", "sim:ms=1"]) == 0
    assert [needs.role for needs in checked] == ["worker"]
    assert "topics of the worker role" in capsys.readouterr().out


def test_config_show_with_a_role_shows_the_role_s_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--role", "stream", "--max-batch", "7",
                 "--input-topic", "uploads"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["worker"]["max_batch"] == 7 and shown["stream"]["input_topic"] == "uploads"


@pytest.mark.parametrize("argv", [["config", "check", "--model", "x"],
                                  ["config", "check", "--role", "controller", "--model", "x"],
                                  ["config", "check", "--role", "client", "--model", "x"]])
def test_a_flag_of_no_role_given_is_still_refused(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "unrecognized arguments: --model x" in capsys.readouterr().err


def test_without_a_role_the_schema_registry_is_checked_too(
        checked: list[Needs], certificates: Certificates,
        capsys: pytest.CaptureFixture[str]) -> None:
    """As each role's start-up check asks it: an https registry whose certificate the
    system's CAs do not verify fails `config check` in one line, and passes with its CA."""
    with https_registry(certificates.cert, certificates.key) as registry:
        url = ["--schema-registry-url", registry.url]
        assert main(["config", "check", *url]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"inferstream: error: the schema registry's certificate at "
                              f"{registry.url} could not be verified")
        assert len(err.splitlines()) == 1
        assert main(["config", "check", *url, "--schema-registry-cafile",
                     str(certificates.ca)]) == 0
    assert registry.requests == ["GET /subjects"]
