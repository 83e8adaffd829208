"""Typed records: one TypedDict (or frozen dataclass) per Avro record of `schemas/*.avsc`,
status enums, builders, and the typed read.

`dict[str, Any]` stops at the codec: what crosses Kafka is built here (a `new_*` builder per
record kind) and read back through `read_record` (`read_result` for the results topic), which
turns enum symbols into the enums and ModelPartitions into `ModelRange`s; `plain_record` is
the way back for a record holding dataclasses. `tests/unit/schemas/test_records.py` fails when
a type here and its `.avsc` disagree on a field's name or on whether it may be null.

The modules, by what the records are about: `jobs` (Job, Task, JobEvent), `results`
(TaskResult, ResultChunk, TaskDeclined), `tracking` (the controller's LedgerEntry and TaskControl),
`readings` (SysInfoSample), `policy_entry` (PolicyEntry, ModelRange, ModelRate), `streams`
(StreamResult, DeadLetter), `announcements` (WorkerAnnouncement), `summary` (a TaskResult as
the controller reads it, without its items); import them all from here.
"""

from inferstream.schemas.records.announcements import WorkerAnnouncement, WorkerState
from inferstream.schemas.records.clock import now_ms
from inferstream.schemas.records.jobs import (
    SIM_PREFIX,
    SIM_SYNTAX,
    InlineItem,
    Job,
    JobEvent,
    JobEventType,
    Task,
    TaskItem,
    model_ref,
    new_task,
    serves,
    split_ref,
    task_ref,
)
from inferstream.schemas.records.policy_entry import (
    ModelRange,
    ModelRate,
    PolicyEntry,
    PolicyKind,
    WorkerHealth,
)
from inferstream.schemas.records.readings import (
    AcceleratorFields,
    Calibration,
    CpuFields,
    ExtraFields,
    MemoryFields,
    ModelPerformance,
    PerformanceFields,
    PublisherFields,
    QueueFields,
    SoftwareFields,
    SysInfoSample,
)
from inferstream.schemas.records.results import (
    ItemResult,
    ItemStatus,
    NamedTensor,
    OutputFields,
    Prediction,
    ResultChunk,
    ResultSummary,
    TaskDeclined,
    TaskResult,
    encodable,
    error_item,
    error_items,
    ok_item,
    output_json,
)
from inferstream.schemas.records.streams import (
    DeadLetter,
    StreamOrigin,
    StreamResult,
    new_dead_letter,
)
from inferstream.schemas.records.summary import (
    encode_result,
    encode_stub,
    read_result_summary,
    summary_of,
)
from inferstream.schemas.records.tracking import (
    LedgerEntry,
    LedgerKind,
    LedgerStatus,
    TaskControl,
    TaskControlReason,
    new_ledger_entry,
)
from inferstream.schemas.records.typed import (
    RECORD_TYPES,
    as_record,
    plain_record,
    read_record,
    read_result,
)

__all__ = [
    "RECORD_TYPES",
    "SIM_PREFIX",
    "SIM_SYNTAX",
    "AcceleratorFields",
    "Calibration",
    "CpuFields",
    "DeadLetter",
    "ExtraFields",
    "InlineItem",
    "ItemResult",
    "ItemStatus",
    "Job",
    "JobEvent",
    "JobEventType",
    "LedgerEntry",
    "LedgerKind",
    "LedgerStatus",
    "MemoryFields",
    "ModelPerformance",
    "ModelRange",
    "ModelRate",
    "NamedTensor",
    "OutputFields",
    "PerformanceFields",
    "PolicyEntry",
    "PolicyKind",
    "Prediction",
    "PublisherFields",
    "QueueFields",
    "ResultChunk",
    "ResultSummary",
    "SoftwareFields",
    "StreamOrigin",
    "StreamResult",
    "SysInfoSample",
    "Task",
    "TaskControl",
    "TaskControlReason",
    "TaskDeclined",
    "TaskItem",
    "TaskResult",
    "WorkerAnnouncement",
    "WorkerHealth",
    "WorkerState",
    "as_record",
    "encodable",
    "encode_result",
    "encode_stub",
    "error_item",
    "error_items",
    "model_ref",
    "new_dead_letter",
    "new_ledger_entry",
    "new_task",
    "now_ms",
    "ok_item",
    "output_json",
    "plain_record",
    "read_record",
    "read_result",
    "read_result_summary",
    "serves",
    "split_ref",
    "summary_of",
    "task_ref",
]
