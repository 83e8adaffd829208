"""`ops/bench/result_codec.py`: its four ways of writing and reading a result run, and its two
writes agree to the byte (it stops with a message where they do not)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import result_codec


def test_the_four_ways_are_measured(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["result_codec.py", "--items", "40", "--repeats", "1"])
    result_codec.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == [
        "| write: Codec.encode (fastavro)", "| write: encode_result (item_writer)",
        "| read: read_record (in full)", "| read: read_result_summary (the controller)"]
    assert "40 items of 5 predictions" in rows[0]
