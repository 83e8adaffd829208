"""The worker role: consume tasks, run the pipeline, commit results exactly once.

`new_worker` builds one (the consume loop `serving.loop.Worker` with the task source,
`source.py`); `await worker.run()` runs it until `worker.request_stop()` (or, with
`idle_exit_s`, until its partitions are quiet).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.worker.source import TaskSource, new_worker

__all__ = ["TaskSource", "new_worker"]


def __getattr__(name: str) -> Any:
    """Imported on first use: `worker.run` (the command) must not load torch to parse flags."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.source"), name)
