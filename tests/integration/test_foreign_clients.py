"""For foreign clients, on a real broker (issue 14.5): `inferstream dump` shows a job's events
and results, and a job produced with plain confluent-kafka and fastavro (the example of
docs/wire-format.md, which imports no inferstream module) completes with its results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from tests.integration.conftest import REPO, Processes

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "examples" / "submit_with_confluent_kafka.py"


def dump(procs: Processes, *args: str) -> list[dict[str, Any]]:
    done = procs.run("dump", *args, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def write_items(folder: Path, count: int) -> list[str]:
    folder.mkdir()
    paths = [folder / f"item-{i}.jpg" for i in range(count)]
    for path in paths:
        path.write_bytes(b"\xff\xd8 not really a jpeg")  # a sim: model never decodes
    return [str(path) for path in paths]


@pytest.mark.timeout(400)
def test_dump_shows_a_jobs_events_and_its_committed_results(
        procs: Processes, tmp_path: Path) -> None:
    procs.controller()
    procs.worker("sim:ms=1")
    items = write_items(tmp_path / "items", 6)
    done = procs.run("submit", "--model", "sim:ms=1", "--input", *items, "--chunk-size", "2",
                     "--wait", "--timeout", "240")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.split()[0]

    events = [line for line in dump(procs, "job-events", "--from-beginning")
              if line["key"] == job_id]
    assert all(line["schema"] == "JobEvent" for line in events)
    kinds = [line["value"]["type"] for line in events]
    assert kinds[0] == "ACCEPTED" and kinds[-1] == "COMPLETED", kinds
    assert events[-1]["value"]["ok_items"] == 6

    results = [line for line in dump(procs, "results", "--from-beginning", "--committed")
               if line["key"] == job_id]
    assert {line["schema"] for line in results} == {"TaskResult"}
    names = sorted(item["name"] for line in results for item in line["value"]["items"])
    assert names == sorted(items)  # 3 tasks of 2, each committed once
    assert {line["partition"] for line in results} == {events[-1]["value"]["home_partition"]}


@pytest.mark.timeout(400)
def test_a_job_from_plain_confluent_kafka_and_fastavro_completes(
        procs: Processes, config: Config, tmp_path: Path) -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    assert "import inferstream" not in source and "from inferstream" not in source
    exported = procs.run("schemas", "export", str(tmp_path / "schemas"))
    assert exported.returncode == 0, exported.stderr
    procs.controller()
    procs.worker("sim:ms=1")
    items = write_items(tmp_path / "items", 5)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--bootstrap-servers", config.bootstrap_servers,
         "--topic-prefix", config.topic_prefix, "--schemas", str(tmp_path / "schemas"),
         "--model", "sim:ms=1", "--timeout", "240", *items],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout, done.stderr, procs.log("controller-0"))
    lines = done.stdout.splitlines()
    job_id = lines[0].removeprefix("submitted ")
    assert lines[-1] == "COMPLETED: 5/5 items, 5 ok, 0 errors", lines
    output = list(Client(config).job(job_id).results())
    assert sorted(line["item"] for line in output) == sorted(items)
    assert {line["status"] for line in output} == {"ok"}
