"""A sysinfo replica that the cluster refuses an ACL after its start stops with one line naming
what to grant (exit 2 through the supervisor), not Faust's crash: tracebacks and exit 1, after
which its supervisor restarted it and the new replica waited for its group in silence."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from prometheus_client import CollectorRegistry

from inferstream.config import load_config
from inferstream.kafka.errors import AuthorizationError
from inferstream.sysinfo import app as app_module
from inferstream.sysinfo.acl_stop import refusal
from inferstream.sysinfo.app import SysinfoApp, Topology
from inferstream.sysinfo.metrics import SysinfoMetrics
from tests.unit.sysinfo.test_web import free_port

CONFIG = load_config({"sasl_username": "sysinfo", "sasl_mechanism": "SCRAM-SHA-512",
                      "security_protocol": "SASL_SSL", "sysinfo": {"port": free_port()}}, {})


class CrashingWorker:
    """Faust's worker as it ends when the cluster refuses the app's offset commit: each
    crashed service logs the error with its traceback, then mode's line, then exit 1."""

    reason: BaseException = GroupAuthorizationFailedError("inferstream.sysinfo")

    def __init__(self, app: Any, **_: Any) -> None:
        self.crash_reason: BaseException | None = None

    def _schedule_shutdown(self, signum: int) -> None:
        """mode's worker's reaction to a stop signal (none comes here)."""

    def execute_from_commandline(self) -> None:
        log = logging.getLogger("tests.faust.consumer")  # another test may quiet faust's
        try:
            raise self.reason
        except type(self.reason):
            log.exception("Crashed reason=%r", self.reason)
        self.crash_reason = self.reason
        try:
            raise RuntimeError("Event loop is closed")
        except RuntimeError:
            log.exception("Error while stopping child")
        logging.getLogger("tests.faust.worker").critical(
            "We experienced a crash! Reraising original exception...")
        raise SystemExit(1)


@pytest.fixture
def crashing(monkeypatch: pytest.MonkeyPatch) -> SysinfoApp:
    monkeypatch.setattr(app_module.faust, "Worker", CrashingWorker)
    monkeypatch.setattr(app_module, "bound_faust_stop", lambda *_: None)
    app = SysinfoApp(CONFIG, Topology(1, 1), SysinfoMetrics(CollectorRegistry()))
    monkeypatch.setattr(app, "declare_internal_topics", lambda: None)
    return app


def test_a_group_refused_after_start_is_the_role_s_one_line(
        crashing: SysinfoApp, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(AuthorizationError) as refused:
        crashing.run()
    assert str(refused.value).startswith(
        "User:sysinfo may not use group inferstream.sysinfo at localhost:9092: no ACL allows "
        "it; an admin grants the sysinfo's ACLs with `inferstream acls --principal "
        "User:sysinfo --role sysinfo")
    assert [(r.getMessage(), r.exc_info) for r in caplog.records if r.levelno >= logging.ERROR
            ] == [("Error while stopping child", None)]


def test_another_crash_is_still_faust_s_exit_status(
        crashing: SysinfoApp, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(CrashingWorker, "reason", RuntimeError("boom"))
    assert crashing.run() == 1
    assert [r.levelname for r in caplog.records if r.levelno >= logging.ERROR] == [
        "ERROR", "ERROR", "CRITICAL"]


def test_a_topic_refused_names_the_topics() -> None:
    error = refusal(CONFIG, TopicAuthorizationFailedError({"t.b", "t.a"}))
    assert str(error).startswith("User:sysinfo may not use topics t.a, t.b at ")
    assert refusal(CONFIG, None) is None


def test_a_policy_round_refused_its_topic_crashes_the_app_with_the_refusal(
        crashing: SysinfoApp, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Faust's producer raises ProducerSendError from aiokafka's refusal: the round failed
    (an error with its traceback) every `policy_interval_s`, for ever, as the app ran on."""
    from faust.exceptions import ProducerSendError

    refused = TopicAuthorizationFailedError("inferstream.policy")
    crashed: list[BaseException] = []

    async def tick() -> None:
        try:
            raise refused
        except TopicAuthorizationFailedError as exc:
            raise ProducerSendError(f"Error while sending: {exc!r}") from exc

    async def crash(reason: BaseException) -> None:
        crashed.append(reason)

    monkeypatch.setattr(crashing, "tick", tick)
    monkeypatch.setattr(crashing.app, "crash", crash)
    asyncio.run(crashing._tick())
    assert crashed == [refused] and caplog.records == []
    assert str(refusal(CONFIG, refused)).startswith(
        "User:sysinfo may not use topic inferstream.policy at ")


class RefusingAdmin:
    """An admin client of a principal that may not describe the sysinfo app's group."""

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Any]:
        from concurrent.futures import Future

        from confluent_kafka import KafkaError, KafkaException

        refused: Future[Any] = Future()
        refused.set_exception(KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)))
        return dict.fromkeys(groups, refused)


def test_a_restarted_replica_refused_its_group_says_so_before_faust_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The supervisor checks the groups once, before its first child: a later child's
    consumer, refused at the join, waited for ever without a word."""
    from inferstream.kafka import preflight
    from inferstream.sysinfo import run as run_module

    monkeypatch.setattr(run_module, "probe", lambda _: Topology(1, 1))
    monkeypatch.setattr(preflight, "admin_client", lambda *_: RefusingAdmin())
    monkeypatch.setattr(SysinfoApp, "run", lambda _: pytest.fail("Faust started"))
    with pytest.raises(AuthorizationError, match=r"may not use group inferstream\.sysinfo"):
        run_module.run(None, CONFIG)  # type: ignore[arg-type]


def test_a_restarted_replica_refused_a_topic_says_so_not_that_it_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The child's own look at its topics said "does not exist: run `inferstream topics
    create`" of a topic its principal could no longer describe."""
    from types import SimpleNamespace

    from confluent_kafka import KafkaError

    from inferstream.kafka import preflight
    from inferstream.sysinfo.run import probe

    shown = SimpleNamespace(error=None, partitions={0: SimpleNamespace(replicas=[1])})
    hidden = SimpleNamespace(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
                             partitions={})
    topics = {"inferstream.sysinfo": shown, "inferstream.policy": hidden,
              "inferstream.dlq": shown}
    monkeypatch.setattr(preflight, "cluster_metadata",
                        lambda *_: SimpleNamespace(topics=topics))
    with pytest.raises(AuthorizationError, match=r"^User:sysinfo may not describe topic "
                                                 r"inferstream\.policy at "):
        probe(CONFIG)
