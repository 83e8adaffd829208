"""Issue 27.2 and 27.3 on the real broker: version 2 of a repository model is dropped into the
repository while a 3,000-item job runs on version 1. The worker loads it beside version 1
without a restart (on SIGHUP); the running job's lines all say version 1, the next job's all
say 2, a job pinned to 1 gets 1, and every job has each item once.

The model is a tiny TorchScript classifier of tensor items; the items are .npy files served
over HTTP with a delay of their own, so that the job takes seconds whatever the machine's
load, as a simulated model's would."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from inferstream.client.client import Client, Job
from inferstream.config import Config
from inferstream.schemas.records import JobEventType
from tests.integration.conftest import Processes

pytestmark = pytest.mark.integration

MODEL = "faces"
FEATURES = 8
CARD = (f"[input]\nkind = \"tensor\"\nshape = [{FEATURES}]\n[output]\nkind = "
        "\"classification\"\n[serving]\nmax_batch = 16\n")
#: each item's fetch waits this long (two decode threads): 3,000 items take at least 9 s
ITEM_DELAY_S = 0.006


def scripted(seed: int) -> bytes:
    """A tiny classifier of FEATURES values into 3 classes, as TorchScript."""
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(FEATURES, 3)).eval()
    out = io.BytesIO()
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.trace(module, torch.rand(2, FEATURES)), out)
    return out.getvalue()


def add_version(repo: Path, number: int) -> None:
    """Version `number` dropped in whole: written aside (a hidden folder is ignored) and
    renamed into place."""
    staging = repo / MODEL / f".{number}"
    staging.mkdir(parents=True)
    (staging / "model.pt").write_bytes(scripted(number))
    staging.rename(repo / MODEL / str(number))


@pytest.fixture
def items() -> Iterator[str]:
    """The base URL of a server that answers any path with one item (.npy), slowly."""
    buffer = io.BytesIO()
    np.save(buffer, np.arange(FEATURES, dtype=np.float32))
    body = buffer.getvalue()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(ITEM_DELAY_S)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def lines_of(job: Job, names: list[str]) -> list[dict[str, object]]:
    """The job's output lines, checked: one per item (`names`, in their order), every item
    OK."""
    lines = list(job.results())
    assert [line["item"] for line in lines] == names
    assert all(line["status"] == "ok" for line in lines)
    return lines


@pytest.mark.timeout(300)
def test_a_new_version_serves_the_next_job_and_the_running_one_keeps_its_own(
        procs: Processes, config: Config, tmp_path: Path, items: str) -> None:
    repo = tmp_path / "repo"
    (repo / MODEL).mkdir(parents=True)
    (repo / MODEL / "model.toml").write_text(CARD, encoding="utf-8")
    add_version(repo, 1)
    procs.controller()
    worker = procs.worker(MODEL, "--model-repository", str(repo), "--repository-poll-s", "0",
                          name="worker-a")
    procs.wait_for_log("worker-a", "assigned partitions=")
    client = Client(config)

    names = {job: [f"{items}/{job}-{i}.npy" for i in range(count)]
             for job, count in (("a", 3000), ("b", 300), ("c", 300))}
    running = client.submit(MODEL, names["a"], chunk_size=50)
    deadline = time.monotonic() + 120
    while running.progress().done_items == 0:
        assert time.monotonic() < deadline, "the first job did not start"
        time.sleep(0.1)
    add_version(repo, 2)
    os.kill(worker.pid, signal.SIGHUP)
    procs.wait_for_log("worker-a", f"serving model {MODEL}:2")
    assert running.progress().state != JobEventType.COMPLETED  # version 2 came mid-job
    time.sleep(1.0)  # the controller reads the worker's new announcement

    following = client.submit(MODEL, names["b"], chunk_size=50)
    pinned = client.submit(f"{MODEL}:1", names["c"], chunk_size=50)
    for job, key, version in ((running, "a", 1), (following, "b", 2), (pinned, "c", 1)):
        status = job.wait(timeout_s=180)
        assert (status.ok_items, status.model_version) == (len(names[key]), version)
        lines = lines_of(job, names[key])
        assert {(line["model"], line["model_version"]) for line in lines} == {
            (MODEL, str(version))}
    assert "declined" not in procs.log("worker-a")
