"""The client role: the Python SDK (`Client`, `Job`), job ids, job listing, result reading,
and `SysInfoClient` for the sysinfo app's HTTP API.

    from inferstream.client import Client

`Client` and its kin are imported on first use, so that `client.sysinfo_api` (stdlib
only) does not pull in the Kafka clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.client.client import Client, Job, JobStatus
    from inferstream.client.sysinfo_api import SysInfoClient

__all__ = ["Client", "Job", "JobStatus", "SysInfoClient"]
_HOMES = {"Client": "client", "Job": "client", "JobStatus": "client",
          "SysInfoClient": "sysinfo_api"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
