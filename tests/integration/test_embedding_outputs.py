"""Outputs beyond top-k on a real broker (issue 27.4): a job of a simulated embedding model, read
back as JSON lines and with `results --format npz` through numpy: one row per item, in index
order, each vector the model's own for that item."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.models import SimModel, load_model
from inferstream.models.collate import collate
from inferstream.models.outputs import Embedding
from tests.integration.conftest import Processes

pytestmark = pytest.mark.integration

MODEL = "sim:ms=1,embedding=64"
ITEMS = 50


def vectors_of(model: SimModel, names: list[str]) -> list[tuple[float, ...]]:
    """What the model answers for each item, called directly."""
    outputs = model.predict(collate([model.preprocess(model.fetch(n)) for n in names]), 1)
    assert all(isinstance(o, Embedding) for o in outputs)
    return [o.vector for o in outputs if isinstance(o, Embedding)]


@pytest.mark.timeout(240)
def test_an_embedding_job_reads_back_as_numpy_arrays(procs: Processes, config: Config,
                                                     tmp_path: Path) -> None:
    procs.controller()
    procs.worker(MODEL)
    job = Client(config).submit(MODEL, [f"photo-{i:03d}.jpg" for i in range(ITEMS)],
                                chunk_size=7)
    status = job.wait(timeout_s=180)
    assert (status.total_items, status.ok_items, status.total_tasks) == (ITEMS, ITEMS, 8)

    out = tmp_path / "embeddings.npz"
    done = procs.run("results", job.job_id, "--format", "npz", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {ITEMS} rows" in done.stderr
    data = np.load(out)
    names = data["item"].tolist()
    assert data["index"].tolist() == list(range(ITEMS))
    assert [Path(n).name for n in names] == [f"photo-{i:03d}.jpg" for i in range(ITEMS)]
    assert data["ok"].all() and set(data["model_version"]) == {"sim"}
    model = load_model(MODEL)
    assert isinstance(model, SimModel)
    embedding = data["embedding"]
    assert embedding.shape == (ITEMS, 64) and embedding.dtype == np.float32
    assert embedding.tolist() == [list(v) for v in vectors_of(model, names)]

    lines = [json.loads(line) for line in procs.run("results", job.job_id).stdout.splitlines()]
    assert [line["item"] for line in lines] == names
    assert {(line["model"], line["model_version"]) for line in lines} == {(MODEL, "sim")}
    assert [line["embedding"] for line in lines] == embedding.tolist()
    assert all(line["top_k"] == [] for line in lines)
