"""Issue 26.3 on the real broker: a pool of a `sim:` worker and an efficientnet_lite0 worker
that is still loading its model (held back by the test hook INFERSTREAM_TEST_START_DELAY_S, as
a compile would hold it). A job for efficientnet_lite0 submitted meanwhile is declined by the
sim worker, waits for the loading one (its announcement keeps the job's tasks held; the
controller is given no grace period of its own) and completes with every item answered by
efficientnet_lite0; `submit --wait` said what it waited for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstream.config import Config
from inferstream.jobs.output import job_results
from inferstream.schemas import Codec
from tests.integration.conftest import Processes
from tests.unit.support.photos import write_photos

pytestmark = pytest.mark.integration

LITE0 = "efficientnet_lite0"
#: Long enough for the job to be declined and held before the lite0 worker can join.
START_DELAY_S = 30


@pytest.mark.timeout(600)
def test_a_job_for_the_model_of_a_worker_still_loading_waits_for_it_and_completes(
        procs: Processes, config: Config, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    photos = write_photos(tmp_path)
    procs.controller("--model-wait-s", "0")  # only the announcement may keep the job waiting
    procs.worker("sim:ms=1", name="worker-sim")
    procs.wait_for_group("worker-sim")
    monkeypatch.setenv("INFERSTREAM_TEST_START_DELAY_S", str(START_DELAY_S))
    procs.worker(LITE0, "--max-batch", "4", name="worker-lite")
    monkeypatch.delenv("INFERSTREAM_TEST_START_DELAY_S")
    procs.wait_for_log("worker-lite", "announced as starting")

    output = tmp_path / "out.jsonl"
    done = procs.run("submit", "--model", LITE0, "--input", *photos, "--chunk-size", "1",
                     "--wait", "--output", str(output), "--timeout", "300", timeout=400)
    assert done.returncode == 0, done.stderr
    assert (f"is waiting for a worker of model '{LITE0}': worker-lite of pool 'default' is "
            "starting with it") in done.stderr, done.stderr
    assert "declined" in procs.log("worker-sim")

    lines = [json.loads(line) for line in output.read_text().splitlines()]
    labels = {Path(line["item"]).stem: line["top_k"][0]["label"] for line in lines}
    assert labels == {"chelsea": "tiger cat", "coffee": "espresso"}
    job_id = done.stdout.split()[0]
    answered = {(r["worker"], r["model"]) for r in job_results(config, job_id, None, Codec())}
    assert answered == {("worker-lite", LITE0)}
