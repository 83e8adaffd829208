"""The model version of issue 27 in Job, Task, LedgerEntry, JobEvent (a version number) and
WorkerAnnouncement (the versions it serves), against the schema before each: the new reader
reads the records written before with no version, and a reader of the earlier schema still
reads every new record as it read it before (Avro schema resolution, the old schema as the
reader's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferstream.schemas import Codec
from tests.unit.examples import EXAMPLES
from tests.unit.support.schemas import history_fields, read_as

GOLDEN = Path(__file__).parent / "golden"
#: each schema, the history file before the version, and the new field with a value set
BEFORE = {
    "Job": ("Job.v1", {"model_version": 3}),
    "Task": ("Task.v2", {"model_version": 3}),
    "LedgerEntry": ("LedgerEntry.v3", {"model_version": 3}),
    "JobEvent": ("JobEvent.v2", {"model_version": 3}),
    "WorkerAnnouncement": ("WorkerAnnouncement.v1", {"model_versions": {"faces": [2, 3]}}),
}
DEFAULTS = {"model_version": None, "model_versions": {}}


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def read_as_before(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` written with the current schema, read by a reader that has the one before."""
    return read_as(BEFORE[name][0], name, record)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_record_written_before_versions_reads_with_none(codec: Codec, name: str) -> None:
    old = codec.decode((GOLDEN / f"{BEFORE[name][0]}.bin").read_bytes(), expected=name)
    (field,) = BEFORE[name][1]
    assert old == {**EXAMPLES[name], field: DEFAULTS[field]}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_reader_before_versions_reads_a_versioned_record_as_before(name: str) -> None:
    record = {**EXAMPLES[name], **BEFORE[name][1]}
    (field,) = BEFORE[name][1]
    known = history_fields(BEFORE[name][0])  # nor the fields added since (priority, ...)
    assert read_as_before(name, record) == {k: v for k, v in record.items()
                                            if k != field and k in known}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_version_round_trips_through_the_codec(codec: Codec, name: str) -> None:
    record = {**EXAMPLES[name], **BEFORE[name][1]}
    assert codec.decode(codec.encode(name, record), expected=name) == record
