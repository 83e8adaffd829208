"""Stream inference: the worker with another source, a topic that anyone writes
(`source.py`), with the record formats it reads and writes (`formats.py`).

From Python, `open_stream` builds a member; `await member.run()` runs it until
`member.request_stop()` (or, with `idle_exit_s`, until the input is quiet):

    member = open_stream(load_config(), model="efficientnet_lite0",
                         input_topic="uploads", output_topic="labels")
    asyncio.run(member.run())
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.stream.open import open_stream
    from inferstream.stream.source import StreamSource, new_member

__all__ = ["StreamSource", "new_member", "open_stream"]
_HOMES = {"StreamSource": "source", "new_member": "source", "open_stream": "open"}


def __getattr__(name: str) -> Any:
    """Imported on first use: `stream.run` (the command) must not load torch to parse flags."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
