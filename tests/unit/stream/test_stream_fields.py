"""A JSON record's `--field` string: a path of a file that base64 could read too
(`/data/items/abc1`: the alphabet, a multiple of 4 long) is that file, not decoded bytes;
base64 of an item and a `file://` URI are read as before."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from inferstream.config import Config, StreamConfig
from inferstream.schemas.records import StreamOrigin
from inferstream.stream.formats import InputReader


def reader() -> InputReader:
    return InputReader(Config(stream=StreamConfig(input_topic="in", output_topic="out",
                                                  input_format="json", field="image")))


def origin() -> StreamOrigin:
    return StreamOrigin(topic="in", partition=0, offset=7, timestamp=None)


def test_a_file_s_path_that_base64_could_read_is_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items").mkdir()
    (tmp_path / "items" / "abc123").write_bytes(b"\x89PNG")
    path = "items/abc123"  # the base64 alphabet only, 12 characters
    item = reader().item(json.dumps({"image": path}).encode(), origin())
    assert (item["name"], item["data"]) == (path, None)


def test_base64_of_an_item_and_a_uri_read_as_before(tmp_path: Path) -> None:
    data = b"\xff\xd8\xff\xe0 a photo's bytes"
    item = reader().item(json.dumps({"image": base64.b64encode(data).decode()}).encode(),
                         origin())
    assert item["data"] == data
    missing = "/data/items/abc1"  # no such file here: base64 still (file:// says a path)
    assert reader().item(json.dumps({"image": missing}).encode(), origin())["data"] is not None
    uri = f"file://{tmp_path}/x.jpg"
    assert reader().item(json.dumps({"image": uri}).encode(), origin())["name"] == uri
