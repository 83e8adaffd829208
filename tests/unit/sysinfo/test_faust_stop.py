"""The sysinfo replica's Faust stop with the cluster away: its streams' last commit waits for
a commit that never ends, its consumer's stop ends cancelled (aiokafka#647) or hangs, its
producer's buffer cannot be sent; each step still returns (with one warning), so Faust ends
the replica with exit 0 instead of waiting until it is killed."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from faust.app.base import App
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Producer

from inferstream.sysinfo.faust_stop import bound_faust_stop

GROUP = "t.sysinfo"


class AwayClient:
    """An aiokafka client whose cluster is away: its stop ends cancelled, or never; its
    flush never."""

    def __init__(self, hangs: bool) -> None:
        self.hangs = hangs

    async def stop(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()
        raise asyncio.CancelledError

    async def flush(self) -> None:
        await asyncio.Event().wait()

    async def wait_empty(self) -> None:
        """Faust's consumer waiting for a commit under way, which aiokafka retries until the
        group coordinator answers."""
        await asyncio.Event().wait()


@pytest.fixture(autouse=True)
def bounded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Faust's stop bounded to 0.1 s for the test, faust's own methods back after it."""
    for cls, name in ((App, "_producer_flush"), (App, "_consumer_wait_empty"),
                      (AIOKafkaConsumerThread, "on_thread_stop"), (Producer, "on_stop")):
        monkeypatch.setattr(cls, name, getattr(cls, name))
    bound_faust_stop(GROUP, 0.1)
    yield


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def why(hangs: bool) -> str:
    return "no answer within 0.1s" if hangs else "its stop ended cancelled, aiokafka#647"


@pytest.mark.parametrize("hangs", [False, True], ids=["cancelled", "hangs"])
def test_the_consumer_threads_stop_returns_with_one_warning(
        caplog: pytest.LogCaptureFixture, hangs: bool) -> None:
    thread: Any = AIOKafkaConsumerThread.__new__(AIOKafkaConsumerThread)  # no thread: its stop
    thread._method_queue = None
    thread._consumer = AwayClient(hangs)

    asyncio.run(asyncio.wait_for(thread.on_thread_stop(), 10))

    assert warnings(caplog) == [f"group {GROUP} not left (its session timeout removes this "
                                f"replica): the cluster did not answer ({why(hangs)})"]


def test_the_apps_flush_at_its_stop_returns_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    app: Any = SimpleNamespace(_producer=AwayClient(hangs=True))

    asyncio.run(asyncio.wait_for(App._producer_flush(app, logging.getLogger("t")), 10))

    assert warnings(caplog) == ["records of the sysinfo app not sent at its stop: the cluster "
                                "did not answer (no answer within 0.1s)"]


def test_the_apps_last_commit_at_its_stop_returns_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    app: Any = SimpleNamespace(conf=SimpleNamespace(stream_wait_empty=True), should_stop=True)
    bound_faust_stop(GROUP, 0.1)  # again: still one bound, not one inside another

    asyncio.run(asyncio.wait_for(App._consumer_wait_empty(app, AwayClient(hangs=True),
                                                          logging.getLogger("t")), 10))

    assert warnings(caplog) == ["offsets of the sysinfo app not committed at its stop: the "
                                "cluster did not answer (no answer within 0.1s)"]


def test_a_rebalance_s_wait_for_its_streams_is_left_unbounded(
        caplog: pytest.LogCaptureFixture) -> None:
    """Only the stop is bounded: a revocation waits for its streams as Faust has it."""
    app: Any = SimpleNamespace(conf=SimpleNamespace(stream_wait_empty=True), should_stop=False)
    wait = App._consumer_wait_empty(app, AwayClient(hangs=True), logging.getLogger("t"))

    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(wait, 0.3))  # still waiting past the stop's 0.1 s
    assert warnings(caplog) == []


#: mode's worker (as Faust's) running a service whose stop hangs, as a replica's with the
#: cluster away; a second signal is set to end it
HANGING_STOP = textwrap.dedent("""
    import asyncio, logging
    from mode import Service, Worker
    from inferstream.sysinfo.faust_stop import exit_at_a_second_signal

    class HangingStop(Service):
        async def on_started(self):
            print("ready", flush=True)

        async def on_stop(self):
            print("stopping", flush=True)
            await asyncio.Event().wait()

    worker = Worker(HangingStop(), quiet=True, redirect_stdouts=False, override_logging=False)
    worker.spinner = None
    exit_at_a_second_signal(worker)
    worker.execute_from_commandline()
""")


@pytest.mark.timeout(150)
def test_a_second_signal_during_the_stop_ends_the_replica_at_once_in_one_line() -> None:
    with subprocess.Popen([sys.executable, "-c", HANGING_STOP], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as replica:
        assert replica.stdout is not None
        try:
            assert replica.stdout.readline().strip() == "ready"
            replica.send_signal(signal.SIGTERM)
            assert replica.stdout.readline().strip() == "stopping"
            replica.send_signal(signal.SIGINT)
            _, err = replica.communicate(timeout=60)
        finally:
            replica.kill()
    assert replica.returncode == 128 + signal.SIGINT
    assert err.strip() == "inferstream: SIGINT again after SIGTERM: exiting now"
