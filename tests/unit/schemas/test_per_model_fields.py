"""Issue 27's per-model figures, against the schema before each: SysInfoSample v3 (every
served model's calibration, each with its version) and PolicyEntry v4 (each model's items/s
and task size). The new reader reads the records written before with the new fields at their
defaults, and a reader of the earlier schema still reads every new record as it read it
before (Avro schema resolution, the old schema as the reader's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferstream.schemas import Codec
from tests.unit.examples import EXAMPLES
from tests.unit.support.schemas import read_as

GOLDEN = Path(__file__).parent / "golden"
BEFORE = {"SysInfoSample": "SysInfoSample.v2", "PolicyEntry": "PolicyEntry.v3"}


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec()


def read_as_before(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """`record` written with the current schema, read by a reader that has the one before."""
    return read_as(BEFORE[name], name, record)


def test_a_sample_written_before_reads_with_no_calibrations(codec: Codec) -> None:
    old = codec.decode((GOLDEN / "SysInfoSample.v2.bin").read_bytes(), expected="SysInfoSample")
    current = EXAMPLES["SysInfoSample"]
    calibration = {**current["calibration"], "version": None}
    assert old == {**current, "calibration": calibration, "calibrations": []}


def test_a_reader_before_reads_a_sample_with_calibrations_as_before() -> None:
    sample = EXAMPLES["SysInfoSample"]
    assert len(sample["calibrations"]) == 2
    before = {k: v for k, v in sample.items() if k != "calibrations"}
    before["calibration"] = {k: v for k, v in sample["calibration"].items() if k != "version"}
    assert read_as_before("SysInfoSample", sample) == before


def test_a_policy_entry_written_before_reads_with_no_model_rates(codec: Codec) -> None:
    old = codec.decode((GOLDEN / "PolicyEntry.v3.bin").read_bytes(), expected="PolicyEntry")
    assert old == {**EXAMPLES["PolicyEntry"], "model_rates": []}


def test_a_reader_before_reads_a_policy_entry_with_model_rates_as_before() -> None:
    entry = EXAMPLES["PolicyEntry"]
    assert entry["model_rates"]
    assert read_as_before("PolicyEntry", entry) == {
        k: v for k, v in entry.items() if k != "model_rates"}


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_new_fields_round_trip_through_the_codec(codec: Codec, name: str) -> None:
    record = EXAMPLES[name]
    assert codec.decode(codec.encode(name, record), expected=name) == record
