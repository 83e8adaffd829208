"""The foreign-client example: docs/wire-format.md shows the file as it is, the file imports no
inferstream code, and what it writes and reads is what inferstream's codec writes and reads."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from inferstream.cli import main
from tests.unit.examples import EXAMPLES
from tests.unit.support.memory import CODEC

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "submit_with_confluent_kafka.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("submit_with_confluent_kafka", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_wire_format_page_shows_the_example_file_as_it_is() -> None:
    page = (REPO / "docs" / "wire-format.md").read_text(encoding="utf-8")
    assert f"```python\n{EXAMPLE.read_text(encoding='utf-8')}```\n" in page


def test_the_example_imports_only_confluent_kafka_fastavro_and_the_standard_library() -> None:
    roots = {name.split(".")[0] for name in imported_modules(EXAMPLE.read_text())}
    assert "inferstream" not in roots
    assert roots - {"confluent_kafka", "fastavro"} <= set(__import__("sys").stdlib_module_names)


def test_its_records_are_inferstreams_both_ways(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schemas", "export", str(tmp_path)]) == 0
    capsys.readouterr()
    example = load_example()
    schemas, by_fingerprint = example.load_schemas(tmp_path)
    job = dict(EXAMPLES["Job"], inline_items=[])
    written = example.encode(*schemas["Job"], job)
    assert written[:10] == CODEC.encode("Job", job)[:10]
    assert CODEC.decode(written, "Job") == job
    name, event = example.decode(schemas, by_fingerprint,
                                 CODEC.encode("JobEvent", EXAMPLES["JobEvent"]))
    assert name == "JobEvent"
    assert event["job_id"] == EXAMPLES["JobEvent"]["job_id"]
    assert event["type"] == EXAMPLES["JobEvent"]["type"]
    assert example.decode(schemas, by_fingerprint, b"\x00\x00\x00\x00\x01") == (None, None)
