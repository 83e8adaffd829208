"""`FixedPolicy`: a `PolicyView` with set answers, for tests of what reads the policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from inferstream.policy.view import ModelRange, WorkerPolicy

T = TypeVar("T")
#: An answer, or a function of the pool that gives it (and may raise, as a table can).
Answer = T | Callable[[str], T]


class FixedPolicy:
    """Answers `workers`, `model_ranges` and `task_size` with what it was given (values, or
    functions of the pool); by default it says what `NO_POLICY` says."""

    def __init__(self, workers: Answer[Mapping[str, WorkerPolicy] | None] = None,
                 ranges: Answer[Sequence[ModelRange]] = (),
                 task_size: Answer[int | None] = None) -> None:
        self._workers, self._ranges, self._task_size = workers, ranges, task_size

    def workers(self, pool: str) -> Mapping[str, WorkerPolicy] | None:
        return _answer(self._workers, pool)

    def model_ranges(self, pool: str) -> Sequence[ModelRange]:
        return _answer(self._ranges, pool)

    def task_size(self, pool: str) -> int | None:
        return _answer(self._task_size, pool)


def _answer(answer: Answer[T], pool: str) -> T:
    return answer(pool) if callable(answer) else answer
