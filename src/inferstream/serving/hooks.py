"""Hooks on the worker's data path: no-op methods that metrics and tracing override.

The consume -> decode -> batch -> infer -> produce loop calls these and nothing else, so that
it stays small (the shape of dramatiq's middleware).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class WorkerHooks:
    """Override what you need; every method is a cheap no-op here."""

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        """One item for `model` was fetched and preprocessed (ok) or became an error."""

    def after_batch(self, model: str, size: int, seconds: float,
                    version: str | None = None) -> None:
        """One batch of `size` items went through `model` (its weights or repository
        `version`, None where unknown) in `seconds` (its forward pass)."""

    def after_batch_cycle(self, model: str, size: int, seconds: float,
                          version: str | None = None) -> None:
        """The batch loop of `model` answered `size` items in `seconds` of wall time, from the
        end of the batch before, while a batch of items or more was waiting: what the
        worker takes for them when it has work, decoding and everything else the process did
        meanwhile included (`after_batch` times the forward pass alone)."""

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        """One task's result, from `model`, was committed with its offset."""

    def after_decline(self, model: str) -> None:
        """A task asking for `model`, which this worker does not serve, was declined."""

    def after_dead_letter(self, reason: str) -> None:
        """A task record could not be read and went to the dead-letter topic."""

    def after_skip(self, model: str) -> None:
        """A task was skipped: its job had finished or a later attempt superseded it."""

    def after_commit(self, partition: int, offset: int, seconds: float) -> None:
        """Task partition `partition` is committed up to `offset` (the next one to read), by
        a commit that took `seconds`."""

    def after_transaction_failed(self, fenced: bool) -> None:
        """A commit's transaction failed: `fenced` by a new owner of the partition, or
        aborted with its outcome unknown (retried after the producer is initialised again)."""

    def on_assignment(self, partitions: int) -> None:
        """The worker now owns `partitions` partitions of the task topic (after an assignment,
        a revoke, or at shutdown)."""

    def after_rebalance(self) -> None:
        """A rebalance gave this worker its new assignment (once per rebalance)."""

    def on_load(self, in_flight_items: int, lags: dict[int, int]) -> None:
        """About once a second: the items read and not committed yet, and each owned
        partition's committed records after its committed offset (its consumer lag)."""

    def after_sysinfo_sample(self, published: bool) -> None:
        """A system-information sample reached the sysinfo topic, or was given up on."""

    def after_collector_error(self, collector: str) -> None:
        """Collector `collector` raised; the sample went out without its fields."""

    def after_collect(self, cpu_seconds: float) -> None:
        """The collectors took one sample, spending `cpu_seconds` of their thread's CPU."""

    def after_model_prepared(self, model: str, compiled: bool, compile_seconds: float) -> None:
        """`model` was loaded with its forward pass `compiled` (else eager), after
        `compile_seconds` of compiling (0 where nothing was compiled)."""

    def after_versions_changed(self, versions: dict[str, list[int]]) -> None:
        """The versions served of each repository model are now `versions` (oldest first, by
        model name): at start, and when a version is loaded, taken out of service (its folder
        gone) or unloaded (a retired one, once quiet)."""

    def after_stream_record(self, status: str, latency_s: float | None) -> None:
        """A stream member committed the outcome (`ok`, `error` or `dead_letter`) of one input
        record, `latency_s` after the record's timestamp (None: it has none)."""


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    """What a chain calls for a hook that none of its hooks objects implement."""


def _does_something(hooks: WorkerHooks, name: str) -> bool:
    """Whether `hooks` does more for hook `name` than `WorkerHooks`' no-op."""
    method = getattr(hooks, name)
    return method is not _nothing and getattr(method, "__func__", None) is not vars(
        WorkerHooks)[name]


def _calling(methods: list[Callable[..., None]]) -> Callable[..., None]:
    """One callable that calls each of `methods` in order."""
    if not methods:
        return _nothing
    if len(methods) == 1:
        return methods[0]

    def forward(*args: Any, **kwargs: Any) -> None:
        for method in methods:
            method(*args, **kwargs)

    return forward


_HOOK_NAMES = tuple(name for name, hook in vars(WorkerHooks).items()
                    if callable(hook) and not name.startswith("_"))


class HookChain(WorkerHooks):
    """Calls every hook of `chain` in order: the worker's own and the caller's.

    Each hook method of `WorkerHooks` is bound when the chain is made, to the methods of the
    chained hooks objects that implement it (a hook added there reaches every chained hooks
    object with no change here): the data path calls some hooks once per item, and a call
    that went through every object's no-op cost it several microseconds each time. A hooks
    object's methods are looked up once, here.
    """

    def __init__(self, *chain: WorkerHooks) -> None:
        self.chain = chain
        for name in _HOOK_NAMES:
            setattr(self, name, _calling([getattr(hooks, name) for hooks in chain
                                          if _does_something(hooks, name)]))
