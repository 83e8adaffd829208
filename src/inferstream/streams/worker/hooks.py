"""Hooks on the worker's data path: no-op methods that metrics and tracing override.

The consume -> decode -> batch -> infer -> produce loop calls these and nothing else, so that
it stays small (the shape of dramatiq's middleware).
"""

from __future__ import annotations


class WorkerHooks:
    """Override what you need; every method is a cheap no-op here."""

    def after_decode(self, model: str, seconds: float, ok: bool) -> None:
        """One item for `model` was fetched and preprocessed (ok) or became an error."""

    def after_batch(self, model: str, size: int, seconds: float) -> None:
        """One batch of `size` items went through `model` in `seconds`."""

    def after_task(self, model: str, ok_items: int, error_items: int) -> None:
        """One task's result, from `model`, was committed with its offset."""

    def after_decline(self, model: str) -> None:
        """A task asking for `model`, which this worker does not serve, was declined."""

    def after_dead_letter(self, reason: str) -> None:
        """A task record could not be read and went to the dead-letter topic."""

    def on_assignment(self, partitions: int) -> None:
        """The worker now owns `partitions` partitions of the task topic."""
