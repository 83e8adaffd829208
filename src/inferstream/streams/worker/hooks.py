"""Hooks on the worker's data path: no-op methods that metrics and tracing override.

The consume -> decode -> batch -> infer -> produce loop calls these and nothing else, so that
it stays small (the shape of dramatiq's middleware).
"""

from __future__ import annotations


class WorkerHooks:
    """Override what you need; every method is a cheap no-op here."""

    def after_decode(self, seconds: float, ok: bool) -> None:
        """One item was fetched and preprocessed (ok) or became a per-item error."""

    def after_batch(self, size: int, seconds: float) -> None:
        """One batch of `size` items went through the model in `seconds`."""

    def after_task(self, ok_items: int, error_items: int) -> None:
        """One task's result was committed with its offset."""

    def after_dead_letter(self, reason: str) -> None:
        """A task record could not be read and went to the dead-letter topic."""

    def on_assignment(self, partitions: int) -> None:
        """The worker now owns `partitions` partitions of the task topic."""
