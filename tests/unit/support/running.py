"""Workers and controllers that a test runs until the outcome it waits for, then stops.

The roles have no idle exit in the unit tests (see `memory.make_config`): a test starts them,
waits for what it asserts to be there (`Running.until`), and stops them, each finishing and
committing what it holds, instead of waiting out a bounded mode's idle time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable

from inferstream.controller.book import JobBook
from inferstream.controller.hooks import ControllerHooks, RoundState
from inferstream.controller.replica import Controller
from inferstream.serving.loop import Worker
from inferstream.testing import MemoryBroker

#: How long a test waits for its outcome before it fails (seconds).
TIMEOUT_S = 30.0
#: The longest wait between two checks of a condition that the broker does not change.
CHECK_S = 0.01


class Running:
    """What a test runs: workers on one event loop on a thread of its own, each controller
    on its own thread. `stop` (also at the end of the test) stops them all and raises the
    first error any of them raised."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._lock = threading.Lock()
        self._workers: list[tuple[Worker, concurrent.futures.Future[None]]] = []
        self._controllers: list[tuple[Controller, threading.Thread]] = []
        self._errors: list[BaseException] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    def workers(self, *workers: Worker) -> None:
        """Run `workers` on the event loop (also from a hook running on it)."""
        loop = self._event_loop()
        for worker in workers:
            run = asyncio.run_coroutine_threadsafe(worker.run(), loop)
            run.add_done_callback(self._finished)
            with self._lock:
                self._workers.append((worker, run))

    def controller(self, controller: Controller) -> Controller:
        """Run `controller` on a thread of its own."""
        thread = threading.Thread(target=self._guarded, args=(controller.run,),
                                  name="controller", daemon=True)
        with self._lock:
            self._controllers.append((controller, thread))
        thread.start()
        return controller

    def wait_for(self, condition: Callable[[], object], timeout_s: float = TIMEOUT_S) -> None:
        """Return once `condition()` holds, checked at each change of the broker; fail when
        it does not within `timeout_s`, or when what runs has failed."""
        deadline = time.monotonic() + timeout_s
        while True:
            since = self.broker.version
            if condition():
                return
            self._raise_errors()
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"not reached within {timeout_s} s: {_name(condition)}")
            self.broker.wait(since, CHECK_S)

    def until(self, condition: Callable[[], object], timeout_s: float = TIMEOUT_S) -> None:
        """`wait_for(condition)`, then `stop()`."""
        self.wait_for(condition, timeout_s)
        self.stop()

    def stop(self) -> None:
        """Stop everything running (each finishes what it holds) and wait for it; raise the
        first error raised."""
        while True:
            with self._lock:
                workers, self._workers = self._workers, []
                controllers, self._controllers = self._controllers, []
            if not workers and not controllers:
                break
            for controller, _ in controllers:
                controller.request_stop()
            for worker, _ in workers:
                self._event_loop().call_soon_threadsafe(worker.request_stop)
            concurrent.futures.wait([run for _, run in workers], TIMEOUT_S)
            for _, thread in controllers:
                thread.join(TIMEOUT_S)
        if self._loop is not None:
            self._close_loop()
        self._raise_errors()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever,
                                                 name="workers", daemon=True)
            self._loop_thread.start()
        return self._loop

    def _close_loop(self) -> None:
        loop, thread = self._loop, self._loop_thread
        assert loop is not None and thread is not None
        for shutdown in (loop.shutdown_asyncgens(), loop.shutdown_default_executor()):
            asyncio.run_coroutine_threadsafe(shutdown, loop).result(TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(TIMEOUT_S)
        loop.close()
        self._loop = self._loop_thread = None

    def _guarded(self, run: Callable[[], object]) -> None:
        try:
            run()
        except BaseException as exc:  # raised in the test by `stop` or `wait_for`
            self._failed(exc)

    def _finished(self, run: concurrent.futures.Future[None]) -> None:
        error = None if run.cancelled() else run.exception()
        if error is not None:
            self._failed(error)

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._errors.append(error)

    def _raise_errors(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]


class QuietRounds(ControllerHooks):
    """Counts the controller's rounds in a row that leave `book` (its own) with nothing to
    do (no active job, no output file due) while it owns partitions: what its idle exit
    waits for, counted instead of timed. Runs on the controller's thread."""

    def __init__(self, book: JobBook) -> None:
        self.book = book
        self.rounds = 0

    def after_round(self, seconds: float, state: RoundState) -> None:
        quiet = state.owned_partitions > 0 and not self.book.busy
        self.rounds = self.rounds + 1 if quiet else 0


def _name(condition: Callable[[], object]) -> str:
    return (condition.__doc__ or getattr(condition, "__qualname__", repr(condition))).strip()
