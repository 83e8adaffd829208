"""SIGTERM and SIGINT for the long-running commands (worker, controller), in any state.

Python runs a signal handler only when the main thread is back in the interpreter, and an
asyncio handler only when the loop turns: a worker stuck in a connect, a controller inside a
long librdkafka call or a loop whose task died would never act on the signal. So a watcher
thread reads the signal from the C handler's wakeup fd and:

- during start-up (no graceful stop registered with `when_stopping` yet) exits at once;
- once running, asks for the graceful stop (finish, commit, leave the group), then exits at
  once on a second signal or if the process is still there `grace_s` later.

Exiting at once is what `kill -9` does, which the guarantees cover (DESIGN.md).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import NoReturn

from inferstream.supervise.child import note_running

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: What the watcher is woken with to end it (no signal has number 0).
_QUIT = b"\x00"
_active: list[StopSignals] = []


def when_stopping(stop: Callable[[], object]) -> None:
    """Make `stop` the graceful stop of the process's StopSignals (none: nothing to do).

    `stop` runs on the watcher thread: it must be thread-safe (set an Event, or hand over
    to the loop with `call_soon_threadsafe`). The process is then past its start-up: a
    supervisor (`supervise`) is told so.
    """
    note_running()
    if _active:
        _active[-1].graceful(stop)


def _noted(_signum: int, _frame: FrameType | None) -> None:
    """The Python-level handler: the watcher thread does the work."""


class StopSignals:
    """Installs the watcher for `with` its block (main thread only); see the module doc."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._stop: Callable[[], object] | None = None
        self._lock = threading.Lock()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._thread = threading.Thread(target=self._watch, name="stop-signals", daemon=True)

    def graceful(self, stop: Callable[[], object]) -> None:
        with self._lock:
            self._stop = stop

    def __enter__(self) -> StopSignals:
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, _noted)
        self._thread.start()
        _active.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _active.remove(self)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        os.write(self._write, _QUIT)
        self._thread.join(5)
        os.close(self._read)
        os.close(self._write)

    # -- the watcher thread ------------------------------------------------------------------
    def _watch(self) -> None:
        signum = self._next_signal(None)
        if not signum:
            return
        with self._lock:
            stop = self._stop
        if stop is None:
            exit_now(signum, "during start-up")
        name = signal.Signals(signum).name
        log.warning("%s: stopping after the work in flight (a second signal, or %gs, "
                    "exits at once)", name, self.grace_s)
        stop()
        again = self._next_signal(self.grace_s)
        if again:
            exit_now(again, f"again after {name}")
        elif again is None:
            exit_now(signum, f"still stopping {self.grace_s:g}s after it")

    def _next_signal(self, timeout_s: float | None) -> int | None:
        """The next stop signal's number; 0 when told to quit, None after `timeout_s`."""
        while True:
            ready, _, _ = select.select([self._read], [], [], timeout_s)
            if not ready:
                return None
            byte = os.read(self._read, 1)[0]  # one at a time: a second signal may follow
            if byte == _QUIT[0]:
                return 0
            if byte in STOP_SIGNALS:
                return byte


def exit_now(signum: int, when: str) -> NoReturn:
    """Leave without cleaning up (as kill -9 would, but with a line saying why)."""
    name = signal.Signals(signum).name
    sys.stderr.write(f"inferstream: {name} {when}: exiting now\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def on_hangup(callback: Callable[[], object]) -> None:
    """`kill -HUP PID` calls `callback` instead of ending the process. It runs on the main
    thread between two of its Python steps (an event loop's wait included): it must only hand
    over (`loop.call_soon_threadsafe`). Main thread only."""
    signal.signal(signal.SIGHUP, lambda _signum, _frame: callback())


def dump_stacks_on_usr1() -> None:
    """`kill -USR1 PID` prints every thread's stack to stderr: where a hung process waits."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
