"""`inferstream schemas export DIR`: the .avsc files a foreign client needs, with the header
bytes that single-object encoding puts before each record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.schemas import SCHEMA_NAMES, Codec, load_schema
from tests.unit.examples import EXAMPLES


def test_export_writes_every_schema_and_the_header_the_codec_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas", "export", str(tmp_path / "avro")]) == 0
    printed = dict(line.split("  header ") for line in capsys.readouterr().out.splitlines())
    codec = Codec(None)
    for name in SCHEMA_NAMES:
        path = tmp_path / "avro" / f"{name}.avsc"
        assert json.loads(path.read_text()) == load_schema(name)
        header = codec.encode(name, EXAMPLES[name])[:10]
        assert printed[str(path)] == header.hex(), name


def test_an_unwritable_folder_is_one_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["schemas", "export", str(blocker / "sub")]) == 2
    assert "cannot write schemas to" in capsys.readouterr().err
