"""Whether a supervised role's process is started again, and after how long: the decisions of
`supervise.parent`, apart from its processes and signals.

Restarted: a child that died of a signal (a native abort, a segfault, the OOM killer's
SIGKILL) or exited with an unexpected status. Not restarted: one the supervisor is stopping,
one that exited 0 (a bounded run), one the cluster refused (a credential or an ACL, whenever
it came: no restart brings an ACL, and one refused for ever would be restarted for ever), and
one that failed its start-up with exit status 2 (a bad setting or a missing model, said in
one line) before any child of this supervisor got past its start-up; after that, a 2 at
start-up is a broker still away, and it is retried.
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import dataclass, field

#: A child that ran this long starts the row of doubling delays again.
HEALTHY_RUN_S = 60.0
#: The restart counter's reasons: the signals of a native crash and of the OOM killer, any
#: other signal, and an unexpected exit status. A bounded set: every series exists from 0.
REASONS = ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGKILL", "signal", "exit")
#: The exit status of an error inferstream explains in one line (`cli.main`).
SETUP_FAILED = 2


def reason_of(status: int) -> str:
    """The counter's reason for an exit status as `os.waitstatus_to_exitcode` gives it (-N:
    killed by signal N)."""
    if status >= 0:
        return "exit"
    name = signal_name(-status)
    return name if name in REASONS else "signal"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def described(status: int) -> str:
    """How a child ended, in words: `died of SIGABRT`, `exited with status 1`."""
    if status < 0:
        return f"died of {signal_name(-status)}"
    return f"exited with status {status}"


def exit_status(status: int) -> int:
    """The supervisor's own exit status for a child's: a signal N as a shell shows it, 128 + N."""
    return status if status >= 0 else 128 - status


@dataclass(frozen=True)
class Ending:
    """How one child ended."""

    status: int  #: as `os.waitstatus_to_exitcode`: the exit status, or -N for signal N
    ran_s: float
    running: bool  #: the child said it was past its start-up
    stopping: bool  #: the supervisor had been asked to stop it
    refusal: str | None = None  #: the cluster refused it, as this line says


@dataclass
class RestartPolicy:
    """Restart decisions and the restarts so far, by reason. Delays double from
    `first_delay_s` up to `max_delay_s`; a child that ran `healthy_s` starts them again."""

    first_delay_s: float
    max_delay_s: float
    healthy_s: float = HEALTHY_RUN_S
    restarts: Counter[str] = field(default_factory=Counter)
    _in_row: int = 0
    _started: bool = False

    @property
    def count(self) -> int:
        return sum(self.restarts.values())

    def after(self, ending: Ending) -> float | None:
        """The delay before the next child starts, or None: no restart."""
        self._started = self._started or ending.running
        if ending.stopping or ending.status == 0 or ending.refusal is not None:
            return None
        if ending.status == SETUP_FAILED and not self._started:
            return None
        if ending.ran_s >= self.healthy_s:
            self._in_row = 0
        delay = min(self.max_delay_s, self.first_delay_s * 2.0 ** min(self._in_row, 30))
        self._in_row += 1
        self.restarts[reason_of(ending.status)] += 1
        return delay
