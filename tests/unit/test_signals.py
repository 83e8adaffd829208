"""SIGTERM and SIGINT stop a long-running process whatever it is doing (issue 9, point 4):
a real child process, hung where a Python signal handler would never help."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from inferstream.kafka.errors import KafkaSetupError
from inferstream.models import load_model
from inferstream.testing import MemoryBroker, MemoryKafkaClients
from inferstream.worker import new_worker
from tests.unit.support.memory import make_config

#: A child under StopSignals whose main thread hangs; `{graceful}` says how it reacts.
CHILD = textwrap.dedent("""
    import sys, threading, time
    from inferstream.signals import StopSignals, when_stopping
    done = threading.Event()
    with StopSignals(grace_s={grace}):
        {graceful}
        print("ready", flush=True)
        done.wait() if {waits} else time.sleep(3600)  # time.sleep: resumed after handlers
    print("stopped cleanly", flush=True)
""")


def run_child(*signals: signal.Signals, grace: float = 600, graceful: str = "pass",
              waits: bool = False) -> tuple[int, str, str]:
    source = CHILD.format(grace=grace, graceful=graceful, waits=waits)
    with subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        try:
            for signum in signals[:-1]:  # two signals at once would be delivered as one
                child.send_signal(signum)
                assert child.stderr is not None
                assert "stopping" in child.stderr.readline()
            child.send_signal(signals[-1])
            out, err = child.communicate(timeout=120)
        except BaseException:
            child.kill()
            raise
        return child.returncode, out, err


@pytest.mark.timeout(150)
def test_a_signal_during_start_up_exits_at_once() -> None:
    code, _, err = run_child(signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert err.strip() == "inferstream: SIGTERM during start-up: exiting now"


@pytest.mark.timeout(150)
def test_a_graceful_stop_that_hangs_is_cut_short_after_the_grace_period() -> None:
    code, out, err = run_child(signal.SIGINT, grace=0.2, graceful="when_stopping(lambda: None)")
    assert code == 128 + signal.SIGINT
    assert "stopped cleanly" not in out
    assert "SIGINT still stopping 0.2s after it: exiting now" in err
    assert "Traceback" not in err


@pytest.mark.timeout(150)
def test_a_second_signal_exits_at_once_and_one_stops_gracefully() -> None:
    code, _, err = run_child(signal.SIGTERM, signal.SIGTERM,
                             graceful="when_stopping(lambda: None)")
    assert code == 128 + signal.SIGTERM
    assert err.strip() == "inferstream: SIGTERM again after SIGTERM: exiting now"
    code, out, err = run_child(signal.SIGTERM, graceful="when_stopping(done.set)", waits=True)
    assert code == 0
    assert "stopped cleanly" in out
    assert "Traceback" not in err


class _HungConsumer:
    """An aiokafka consumer whose connect never finishes (a broker that accepts, then
    says nothing)."""

    def __init__(self, real: Any, connecting: asyncio.Event) -> None:
        self.real = real
        self.connecting = connecting

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    async def start(self) -> None:
        self.connecting.set()
        await asyncio.Event().wait()


class _HungClients(MemoryKafkaClients):
    connecting: asyncio.Event

    def aio_consumer(self, kwargs: dict[str, Any]) -> Any:
        return _HungConsumer(super().aio_consumer(kwargs), self.connecting)


class _RefusedConsumer(_HungConsumer):
    async def start(self) -> None:
        raise KafkaConnectionError("Unable to bootstrap from [('mem', 1)]")


class _RefusedClients(MemoryKafkaClients):
    def aio_consumer(self, kwargs: dict[str, Any]) -> Any:
        return _RefusedConsumer(super().aio_consumer(kwargs), asyncio.Event())


CONFIG = make_config()


@pytest.mark.timeout(60)
def test_a_worker_stopped_while_it_connects_gives_up_the_start(broker: MemoryBroker) -> None:
    config = CONFIG

    async def scenario() -> str:
        clients = _HungClients(broker)
        clients.connecting = asyncio.Event()
        worker = new_worker(config, load_model("sim:ms=0"), clients=clients)
        running = asyncio.create_task(worker.run())
        await clients.connecting.wait()
        asyncio.get_running_loop().call_soon_threadsafe(worker.request_stop)
        await running  # returns instead of hanging (or raising CancelledError)
        return "returned"

    assert asyncio.run(scenario()) == "returned"


@pytest.mark.timeout(60)
def test_a_worker_whose_clients_cannot_start_raises_one_setup_error(
        broker: MemoryBroker) -> None:
    worker = new_worker(CONFIG, load_model("sim:ms=0"), clients=_RefusedClients(broker))
    with pytest.raises(KafkaSetupError, match="cannot start the worker's Kafka clients at mem:1"):
        asyncio.run(worker.run())
