"""A job's priority and weight (issue 29.4) in Job and JobEvent, against the schema before
each: a record written before reads as priority 0 and weight 1, and a reader of the earlier
schema still reads every new record as it read it before."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.schemas import Codec
from tests.unit.examples import EXAMPLES
from tests.unit.support.schemas import read_as

GOLDEN = Path(__file__).parent / "golden"
#: each schema and the history file before priorities
BEFORE = {"Job": "Job.v2", "JobEvent": "JobEvent.v3"}
URGENT = {"priority": 5, "weight": 2.5}


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_record_written_before_priorities_reads_as_priority_0_and_weight_1(
        codec: Codec, name: str) -> None:
    old = codec.decode((GOLDEN / f"{BEFORE[name]}.bin").read_bytes(), expected=name)
    assert old["priority"] == 0
    assert old["weight"] == 1.0
    assert old == EXAMPLES[name]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_reader_before_priorities_reads_a_prioritised_record_as_before(name: str) -> None:
    record = {**EXAMPLES[name], **URGENT}
    assert read_as(BEFORE[name], name, record) == {
        k: v for k, v in record.items() if k not in URGENT}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_a_priority_and_weight_round_trip_through_the_codec(codec: Codec, name: str) -> None:
    record = {**EXAMPLES[name], **URGENT}
    assert codec.decode(codec.encode(name, record), expected=name) == record
