"""Faust's stop with the cluster away: each of its Kafka steps bounded, never a traceback.

Four steps of a Faust worker's stop await the cluster unguarded (faust-streaming 0.15):

* the app waits for its streams to be empty and commits their offsets
  (`App._consumer_wait_empty` -> `Consumer.wait_empty` -> `commit`), which first waits for a
  commit under way: the consumer's periodic commit, which aiokafka retries until the group
  coordinator answers, for ever while the cluster is away (seen with py-spy and a dump of
  the loop's tasks: 4 of 6 stops of a replica beside a worker and a stream member); the
  same wait at a rebalance's revocation is left as Faust has it;
* the app flushes its producer's buffer (`App._producer_flush`): the records it still holds
  (changelog writes, the fleet topic's forwards) wait for a broker that is away, for ever;
* the consumer thread stops its aiokafka consumer (`AIOKafkaConsumerThread.on_thread_stop`
  in faust/transport/drivers/aiokafka.py), whose stop may end in a CancelledError of
  aiokafka's own (https://github.com/aio-libs/aiokafka/issues/647; see `kafka.stopping`):
  the thread's shutdown ends there ("Exception in thread ... on_thread_stop ...
  CancelledError", as in https://github.com/robinhood/faust/issues/771) before it tells the
  app that the thread is done;
* the producer stops its aiokafka producer (`Producer.on_stop`), which sends what it holds.

Each left the replica waiting until its supervisor killed it (exit 137) instead of exiting 0.
Here each gets `timeout_s` and a warning where it did not finish. Drop this once
faust-streaming bounds those steps.

A second SIGTERM or SIGINT during that stop (mode's `Worker._schedule_shutdown` in
mode/worker.py acts on the first only) ends the replica at once with the line every role says
(`signals.exit_now`): the replica went on stopping, and under a supervisor was killed 2 s
later without a word, its supervisor's exit 137.
"""

from __future__ import annotations

import signal
from typing import Any

from faust.app.base import App
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Producer

from inferstream.kafka.stopping import stop_or_warn
from inferstream.signals import exit_now


def bound_faust_stop(group_id: str, timeout_s: float) -> None:
    """Give each Kafka step of Faust's stop `timeout_s`, one warning where it did not finish
    (idempotent; for the process: one sysinfo app runs in it)."""

    async def consumer_wait_empty(self: Any, consumer: Any, logger: Any) -> None:
        if not self.should_stop:  # a rebalance's revocation waits too: Faust's own wait
            await wait_empty(self, consumer, logger)
            return
        await stop_or_warn(wait_empty(self, consumer, logger), timeout_s,
                           "offsets of the sysinfo app not committed at its stop")

    async def producer_flush(self: Any, logger: Any) -> None:
        if self._producer is not None:
            await stop_or_warn(self._producer.flush(), timeout_s,
                               "records of the sysinfo app not sent at its stop")

    async def on_thread_stop(self: Any) -> None:
        # What faust's own does, the consumer's stop bounded: the method queue first.
        await super(AIOKafkaConsumerThread, self).on_thread_stop()
        if self._consumer is not None:
            await stop_or_warn(self._consumer.stop(), timeout_s,
                               f"group {group_id} not left (its session timeout removes "
                               "this replica)")

    async def on_stop(self: Any) -> None:
        # What faust's own does (no transactions here: exactly_once is not used).
        await super(Producer, self).on_stop()
        self.transport._topic_waiters.clear()  # noqa: SLF001 - as faust does
        producer, self._producer = self._producer, None
        if producer is not None:
            await stop_or_warn(producer.stop(), timeout_s, "sysinfo app's producer not closed")

    wait_empty = getattr(App._consumer_wait_empty, "__wrapped__",  # noqa: SLF001
                         App._consumer_wait_empty)  # noqa: SLF001
    consumer_wait_empty.__wrapped__ = wait_empty  # type: ignore[attr-defined]
    App._consumer_wait_empty = consumer_wait_empty  # type: ignore[method-assign]  # noqa: SLF001
    App._producer_flush = producer_flush  # type: ignore[method-assign]  # noqa: SLF001
    AIOKafkaConsumerThread.on_thread_stop = on_thread_stop  # type: ignore[method-assign]
    Producer.on_stop = on_stop  # type: ignore[method-assign]


def exit_at_a_second_signal(worker: Any) -> None:
    """Make a second stop signal end the process of Faust's `worker` at once, in one line."""
    schedule_shutdown = worker._schedule_shutdown  # noqa: SLF001 - mode's, see the module doc
    first: list[signal.Signals] = []

    def schedule_or_exit(signum: signal.Signals) -> None:
        if first:
            exit_now(signum, f"again after {first[0].name}")
        first.append(signal.Signals(signum))
        schedule_shutdown(signum)

    worker._schedule_shutdown = schedule_or_exit  # noqa: SLF001
