"""The client role: the Python SDK (`Client`, `Job`), job ids, job listing, result reading,
and `SysInfoClient` for the sysinfo app's HTTP API.

    from inferstream.client import Client, JobFailedError

`Client` and its kin are imported on first use, so that `client.sysinfo_api` (stdlib
only) does not pull in the Kafka clients. The errors a caller of the SDK catches are here
too (docs/cli.md, "What to catch"), wherever they are defined: they were only in three
modules of their own (`inferstream.errors`, `inferstream.jobs.errors`,
`inferstream.kafka.errors`) that the docs did not name.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from inferstream.client.client import Client, Job, JobStatus
    from inferstream.client.sysinfo_api import SysInfoClient
    from inferstream.errors import ConfigError, InferstreamError
    from inferstream.jobs.errors import (
        InlineTooLargeError,
        InputError,
        InvalidJobError,
        JobCancelledError,
        JobFailedError,
        JobNotAcceptedError,
        JobNotDeliveredError,
        JobRejectedError,
        JobTimeoutError,
        OutputFormatError,
        OutputIncompleteError,
        OutputPathError,
        ResultsDeletedError,
        UnknownJobError,
    )
    from inferstream.jobs.npz import NpzWritten
    from inferstream.kafka.errors import AuthorizationError, KafkaSetupError, PartitionReadError

_JOB_ERRORS = ("InlineTooLargeError", "InputError", "InvalidJobError", "JobCancelledError",
               "JobFailedError", "JobNotAcceptedError", "JobNotDeliveredError",
               "JobRejectedError", "JobTimeoutError", "OutputFormatError",
               "OutputIncompleteError", "OutputPathError", "ResultsDeletedError",
               "UnknownJobError")
#: Each name -> the module it is defined in.
_HOMES = {
    "Client": "inferstream.client.client", "Job": "inferstream.client.client",
    "JobStatus": "inferstream.client.client",
    "SysInfoClient": "inferstream.client.sysinfo_api",
    "NpzWritten": "inferstream.jobs.npz",
    "InferstreamError": "inferstream.errors", "ConfigError": "inferstream.errors",
    "AuthorizationError": "inferstream.kafka.errors",
    "KafkaSetupError": "inferstream.kafka.errors",
    "PartitionReadError": "inferstream.kafka.errors",
    **dict.fromkeys(_JOB_ERRORS, "inferstream.jobs.errors"),
}
__all__ = ["AuthorizationError", "Client", "ConfigError", "InferstreamError",
           "InlineTooLargeError", "InputError", "InvalidJobError", "Job",
           "JobCancelledError", "JobFailedError", "JobNotAcceptedError",
           "JobNotDeliveredError", "JobRejectedError", "JobStatus", "JobTimeoutError",
           "KafkaSetupError", "NpzWritten", "OutputFormatError", "OutputIncompleteError",
           "OutputPathError", "PartitionReadError", "ResultsDeletedError", "SysInfoClient",
           "UnknownJobError"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
