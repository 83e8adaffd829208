"""What the client says on a real broker when a job has nothing to run it, or does not exist:
the messages of `submit --wait`, `status` and `results` (point 5 of issue 9)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from inferstream.jobs.ids import new_job_id
from tests.integration.conftest import Processes, topics_config

pytestmark = pytest.mark.integration


def test_unknown_job_ids_are_errors(procs: Processes) -> None:
    job_id = new_job_id()
    for command in ("status", "results"):
        done = procs.run(command, job_id, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr.startswith(f"inferstream: error: no job {job_id} on topic ")


@pytest.fixture
def beside(kafka: str, tmp_path: Path) -> Iterator[Processes]:
    """Processes on topics of their own, to run beside `procs` without meeting them."""
    logdir = tmp_path / "beside"
    logdir.mkdir()
    processes = Processes(topics_config(kafka), logdir)
    yield processes
    processes.stop_all()


@pytest.mark.timeout(300)
def test_submit_wait_says_what_it_waits_for(procs: Processes, beside: Processes) -> None:
    """No controller: says so, and `status` lists the job as submitted. A controller but no
    worker: says the pool has no live worker. Both wait until --timeout, side by side (each
    case on its own topics)."""
    beside.controller()
    with ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(procs.run, "submit", "--model", "sim:ms=1", "--input", "/a.jpg",
                              "--wait", "--timeout", "13", timeout=120)
        busy = pool.submit(beside.run, "submit", "--model", "sim:ms=1", "--input", "/b.jpg",
                           "--wait", "--timeout", "25", timeout=120)
        alone, idle = waiting.result(), busy.result()
    job_id = alone.stdout.strip()
    assert alone.returncode == 2
    assert f"no controller has accepted job {job_id} after 1" in alone.stderr
    listed = procs.run("status", timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert f"{job_id}  submitted" in listed.stdout

    assert idle.returncode == 2
    assert "no worker in pool 'default' has taken a task of job" in idle.stderr
    assert "`inferstream worker --pool default --model sim:ms=1`" in idle.stderr
