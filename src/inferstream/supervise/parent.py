"""The supervising parent: runs a role as its child and starts it again when it dies.

The child runs in a process group of its own, so that a terminal's Ctrl-C reaches the
supervisor alone, which passes it on once: SIGTERM and SIGINT drain the child as `signals`
says (a second one ends it at once), SIGUSR1 dumps its stacks, SIGHUP makes a worker look at its
model repository (a signal the supervisor left alone would end it). A child still there
`grace_s` + 10 s after the first stop signal, or 2 s after a second, is killed. Whatever the
child leaves in its group when it ends is killed too, and the supervisor reaps every process
that ends under it (as a container's PID 1 must).

The child's TMPDIR is a folder of the supervisor's own, emptied when the child ends: a child
killed with SIGKILL (the OOM killer, a native abort) runs no clean-up, and torch's loader of
compiled packages (`aoti_load_package`) extracts each one into TMPDIR, removed only by its
destructor: 11 MB for efficientnet_lite0, left in /tmp for good with every such death.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType, TracebackType

from inferstream.leftovers import claim
from inferstream.supervise.environ import (
    REFUSED,
    RESTARTS,
    RUNNING,
    RUNNING_FD,
    SUPERVISOR_PID,
    encode_restarts,
)
from inferstream.supervise.policy import Ending, RestartPolicy, described, exit_status

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_WATCHED = (*STOP_SIGNALS, signal.SIGUSR1, signal.SIGHUP, signal.SIGCHLD)
#: How long past its own grace period a stopping child may take before it is killed.
GRACE_MARGIN_S = 10.0
#: How long a child may take to leave after a second stop signal.
SECOND_SIGNAL_S = 2.0


def _noted(_signum: int, _frame: FrameType | None) -> None:
    """The Python-level handler: the wakeup fd carries the signal."""


class _SignalPipe:
    """The watched signals, one number at a time, for `with` its block (main thread only)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._previous: dict[int, object] = {}
        self._previous_fd = -1

    def __enter__(self) -> _SignalPipe:
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for signum in _WATCHED:
            self._previous[signum] = signal.signal(signum, _noted)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)

    def next(self, timeout_s: float | None) -> int | None:
        """The next signal's number, or None once `timeout_s` passed."""
        ready, _, _ = select.select([self._read], [], [], timeout_s)
        return os.read(self._read, 1)[0] if ready else None


@dataclass
class _Child:
    pid: int
    started: float
    running_fd: int

    def said(self) -> tuple[bool, str | None]:
        """Whether it said its start-up was over, and the refusal's line it said, if any
        (then closes the pipe)."""
        said = b""
        try:
            while chunk := os.read(self.running_fd, 4096):
                said += chunk
        except BlockingIOError:  # what it started may hold the pipe: all is said by now
            pass
        finally:
            os.close(self.running_fd)
        lines = said.split(b"\n")
        refusal = next((line[len(REFUSED):].decode("utf-8", "replace") for line in lines
                        if line.startswith(REFUSED)), None)
        return RUNNING in lines, refusal


class Supervisor:
    """Runs `command` (the role) as a child, restarting it as `policy` decides; logs each
    start with the child's pid and each restart in one line."""

    def __init__(self, role: str, command: Sequence[str], policy: RestartPolicy,
                 grace_s: float, environ: dict[str, str] | None = None) -> None:
        self.role = role
        self.command = list(command)
        self.policy = policy
        self.grace_s = grace_s
        self.environ = dict(os.environ if environ is None else environ)
        root = tempfile.gettempdir()
        #: the children's TMPDIR (see the module's doc), in the supervisor's own (what
        #: supervisors of the role killed with SIGKILL on this host left there is removed)
        self.scratch = os.path.join(root, claim(root, f"inferstream-{role}-"))

    def run(self) -> int:
        """Until a child is not restarted: its exit status (128 + N for a signal N); 0 when
        stopped between two children."""
        try:
            return self._run()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _run(self) -> int:
        with _SignalPipe() as signals:
            while True:
                child = self._start()
                ending = self._watch(child, signals)
                shutil.rmtree(self.scratch, ignore_errors=True)  # what the child left there
                delay = self.policy.after(ending)
                if delay is None:
                    self._say_refusal(child, ending)
                    return exit_status(ending.status)
                log.warning("%s process %d %s after %.1fs: restart %d in %gs", self.role,
                            child.pid, described(ending.status), ending.ran_s,
                            self.policy.count, delay)
                if self._stopped_within(delay, signals):
                    return 0

    def _say_refusal(self, child: _Child, ending: Ending) -> None:
        """A child the cluster refused: its line is the supervisor's last (the child left it
        to it), after why no other child starts."""
        if ending.refusal is None:
            return
        log.warning("%s process %d %s after %.1fs, refused by the cluster: not restarted "
                    "(no restart brings a credential or an ACL)", self.role, child.pid,
                    described(ending.status), ending.ran_s)
        print(f"inferstream: error: {ending.refusal}", file=sys.stderr, flush=True)

    def _start(self) -> _Child:
        scratch = self._scratch()
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_inheritable(write, True)
        env = {**self.environ, SUPERVISOR_PID: str(os.getpid()), RUNNING_FD: str(write),
               RESTARTS: encode_restarts(self.policy.restarts), **scratch}
        try:
            # setsigdef: what Python ignores for itself (SIGPIPE) is not the child's to inherit
            pid = os.posix_spawn(self.command[0], self.command, env, setpgroup=0,
                                 setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError:
            os.close(read)
            raise
        finally:
            os.close(write)
        restart = f" (restart {self.policy.count})" if self.policy.count else ""
        log.info("%s process %d started%s", self.role, pid, restart)
        return _Child(pid, time.monotonic(), read)

    def _scratch(self) -> dict[str, str]:
        """The child's TMPDIR, made; none (the child inherits the supervisor's) where it
        cannot be made."""
        try:
            os.makedirs(self.scratch, mode=0o700, exist_ok=True)
        except OSError as exc:
            log.warning("%s: cannot make the child's temporary folder %s (%s); it uses %s",
                        self.role, self.scratch, exc, tempfile.gettempdir())
            return {}
        return {"TMPDIR": self.scratch}

    def _watch(self, child: _Child, signals: _SignalPipe) -> Ending:
        """Pass signals on to the child until it ends; how it ended."""
        stopping: int | None = None
        deadline: float | None = None
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            signum = signals.next(wait)
            if signum is None:  # the child outlived its deadline
                _kill_group(child.pid)
                deadline = None
            elif signum == signal.SIGCHLD:
                status = _reap(child.pid)
                if status is not None:
                    running, refusal = child.said()
                    return Ending(status, time.monotonic() - child.started, running,
                                  stopping is not None, refusal)
            else:
                os.kill(child.pid, signum)
                if signum in STOP_SIGNALS:
                    last = self.grace_s + GRACE_MARGIN_S if stopping is None else SECOND_SIGNAL_S
                    deadline = min(deadline or float("inf"), time.monotonic() + last)
                    stopping = signum

    def _stopped_within(self, delay_s: float, signals: _SignalPipe) -> bool:
        """Wait `delay_s`; True if a stop signal came meanwhile."""
        until = time.monotonic() + delay_s
        while (left := until - time.monotonic()) > 0:
            signum = signals.next(left)
            if signum in STOP_SIGNALS:
                return True
            if signum == signal.SIGCHLD:
                _reap(None)
        return False


def _reap(pid: int | None) -> int | None:
    """Reap every process that ended (orphans come to a container's PID 1); the exit status
    of `pid` if it was one of them, after killing what it left in its process group."""
    found = None
    while True:
        try:
            ended, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if ended == 0:
            break
        if ended == pid:
            found = os.waitstatus_to_exitcode(status)
    if found is not None and pid is not None:
        _kill_group(pid)
    return found


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
