"""`results --format npz`: a job's embeddings, tensors and top-k as numpy arrays, one row per
item in item order, written in flat memory and read back with numpy alone."""

from __future__ import annotations

import argparse
import re
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from inferstream.client.client import Client
from inferstream.client.job_commands import ALL_FAILED, run_results
from inferstream.jobs.errors import OutputFormatError, OutputPathError
from inferstream.jobs.ids import new_job_id
from inferstream.jobs.npz import write_npz
from inferstream.jobs.output import job_results
from inferstream.schemas.records import (
    ItemResult,
    JobEventType,
    NamedTensor,
    TaskItem,
    TaskResult,
    error_item,
    ok_item,
)
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, make_config
from tests.unit.support.records import TOP, put_event, put_results

WIDTH = 16


def vector(index: int, width: int = WIDTH) -> list[float]:
    """Item `index`'s embedding: float32 values, exact through Avro's float."""
    return [float(np.float32(index + k / 8)) for k in range(width)]


def embedded(item: TaskItem) -> ItemResult:
    """Every third item failed; the others have their vector."""
    if item["index"] % 3 == 1:
        return error_item(item, "not an image")
    return ok_item(item, embedding=vector(item["index"]))


def test_embeddings_read_back_one_row_per_item_in_item_order(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=4, chunk=3, order=[2, 0, 3, 1],
                answer=embedded)
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=4, chunk=3)
    written = Client(config, CODEC, clients).job(job_id).write_npz(str(tmp_path / "out.npz"))
    assert (written.rows, written.ok, written.errors) == (12, 8, 4)
    data = np.load(tmp_path / "out.npz")
    assert data["index"].tolist() == list(range(12))
    assert data["item"][5] == "/data/images/n0000005.JPEG"
    assert data["ok"].tolist() == [i % 3 != 1 for i in range(12)]
    assert set(data["model_version"]) == {"sim"} and set(data["model"]) == {"sim:ms=0"}
    embedding = data["embedding"]
    assert embedding.shape == (12, WIDTH) and embedding.dtype == np.float32
    for i in range(12):
        if i % 3 == 1:
            assert np.isnan(embedding[i]).all()
        else:
            assert embedding[i].tolist() == vector(i)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]  # no spool left


def test_a_job_whose_every_item_failed_has_no_output_array_and_the_command_says_so(
        clients: MemoryKafkaClients, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=2, chunk=2, ok=False)
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=2, chunk=2, ok=False)
    path = tmp_path / "out.npz"
    args = argparse.Namespace(job=job_id, format="npz", output=str(path))
    assert run_results(args, Client(config, CODEC, clients)) == ALL_FAILED
    assert capsys.readouterr().err.startswith(
        f"wrote 4 rows to {path} (index, item, ok, model, model_version only: with no item "
        "ok, the outputs' shapes are unknown)\n")
    assert sorted(np.load(path).files) == ["index", "item", "model", "model_version", "ok"]


def tensors_of(index: int) -> list[NamedTensor]:
    logits = np.arange(6, dtype="<f2").reshape(2, 3) + index
    mask = np.array([index % 2], dtype="u1")
    return [NamedTensor(name="logits", dtype="float16", shape=[2, 3], data=logits.tobytes()),
            NamedTensor(name="mask", dtype="uint8", shape=[1], data=mask.tobytes())]


def result(items: list[ItemResult], task_id: int = 0) -> TaskResult:
    return TaskResult(job_id="j", task_id=task_id, attempt=1, worker="w", model="m",
                      model_version="2", items=items, started_at=0, finished_at=0,
                      decode_seconds=0.0, inference_seconds=0.0)


def item(index: int) -> TaskItem:
    return TaskItem(index=index, name=f"x{index}.npy", data=None)


def test_a_path_no_file_can_be_written_at_is_an_error_naming_it_not_a_temporary_file(
        clients: MemoryKafkaClients, tmp_path: Path) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=1, chunk=2, answer=embedded)
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=1, chunk=2)
    job = Client(config, CODEC, clients).job(job_id)
    path = str(tmp_path / "nodir" / "z.npz")
    with pytest.raises(OutputPathError) as raised:
        job.write_npz(path)
    assert str(raised.value) == f"{path}: cannot write in {tmp_path / 'nodir'}"
    with pytest.raises(OutputPathError, match=f"{re.escape(str(tmp_path))} is a directory"):
        job.write_npz(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_named_tensors_become_one_array_each_with_their_dtype_and_shape(
        tmp_path: Path) -> None:
    """The first item failed: its rows are filled (NaN, 0) once the arrays' shapes are known."""
    items = [error_item(item(0), "bad"), *(ok_item(item(i), tensors=tensors_of(i))
                                          for i in (1, 2))]
    write_npz([result(items)], str(tmp_path / "t.npz"))
    data = np.load(tmp_path / "t.npz")
    logits, mask = data["tensors/logits"], data["tensors/mask"]
    assert (logits.dtype, logits.shape, mask.dtype, mask.shape) == (
        np.float16, (3, 2, 3), np.uint8, (3, 1))
    assert np.isnan(logits[0]).all() and mask[0].tolist() == [0]
    assert logits[2].tolist() == (np.arange(6).reshape(2, 3) + 2).tolist()
    assert mask[1:].ravel().tolist() == [1, 0]


def test_top_k_becomes_class_ids_and_scores(tmp_path: Path) -> None:
    items = [ok_item(item(0), TOP[:3]), error_item(item(1), "bad")]
    write_npz([result(items)], str(tmp_path / "k.npz"))
    data = np.load(tmp_path / "k.npz")
    assert data["class_id"].tolist() == [[0, 1, 2], [-1, -1, -1]]
    assert data["score"][0].tolist() == pytest.approx([0.1] * 3)
    assert "embedding" not in data.files


def test_an_embedding_of_another_width_is_an_error_naming_the_item(tmp_path: Path) -> None:
    items = [ok_item(item(0), embedding=vector(0)), ok_item(item(1), embedding=vector(1, 8))]
    with pytest.raises(OutputFormatError, match=r"item 'x1.npy': embedding is float32 \[8\], "
                       r"the items before it float32 \[16\]"):
        write_npz([result(items)], str(tmp_path / "bad.npz"))
    assert list(tmp_path.iterdir()) == []  # neither the file nor its spool


def test_a_tensor_of_another_dtype_is_an_error_naming_the_dtype(tmp_path: Path) -> None:
    wide = NamedTensor(name="mask", dtype="uint16", shape=[1], data=b"\x00\x00")
    items = [ok_item(item(0), tensors=tensors_of(0)),
             ok_item(item(1), tensors=[tensors_of(1)[0], wide])]
    with pytest.raises(OutputFormatError) as raised:
        write_npz([result(items)], str(tmp_path / "bad.npz"))
    assert str(raised.value) == (
        "item 'x1.npy': tensors/mask is uint16 [1], the items before it uint8 [1]: an npz "
        "array has one dtype (use --format jsonl)")


@pytest.mark.parametrize("outputs", [
    [tensors_of(0), tensors_of(1)[:1]],  # the second without the first's mask
    [tensors_of(0)[:1], tensors_of(1)],  # the second with a mask the first lacks
])
def test_an_ok_item_whose_outputs_are_not_the_items_before_its_is_an_error(
        tmp_path: Path, outputs: list[list[NamedTensor]]) -> None:
    """Never a row of NaN marked ok: a dict output without one of its keys does not fit."""
    items = [error_item(item(0), "bad"),
             *(ok_item(item(i + 1), tensors=tensors) for i, tensors in enumerate(outputs))]
    with pytest.raises(OutputFormatError) as raised:
        write_npz([result(items)], str(tmp_path / "bad.npz"))
    names = [", ".join(f"tensors/{t['name']}" for t in tensors) for tensors in outputs]
    assert str(raised.value) == (
        f"item 'x2.npy': its outputs are {names[1]}, the items before it {names[0]}: every "
        "ok item of an npz file has the same outputs (use --format jsonl)")
    assert list(tmp_path.iterdir()) == []


def test_a_tensor_whose_data_does_not_fit_its_shape_is_an_error(tmp_path: Path) -> None:
    bad = NamedTensor(name="logits", dtype="float32", shape=[4], data=b"\x00" * 12)
    with pytest.raises(OutputFormatError, match="'logits' holds 12 bytes, not float32 \\[4\\]"):
        write_npz([result([ok_item(item(0), tensors=[bad])])], str(tmp_path / "bad.npz"))


def peak_writing(clients: MemoryKafkaClients, tasks: int, path: Path) -> int:
    """The writer's peak traced memory for a job of `tasks` tasks of 32 vectors of 64."""
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=tasks, chunk=32,
                answer=lambda i: ok_item(i, embedding=vector(i["index"], 64)))
    tracemalloc.start()
    try:
        written = write_npz(job_results(config, job_id, None, CODEC, clients), str(path))
        peak: int = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert written.rows == tasks * 32
    return peak


def test_memory_stays_flat_as_the_job_grows(clients: MemoryKafkaClients,
                                            tmp_path: Path) -> None:
    """6,400 vectors take no more memory to write than 1,600 (their float32 values alone
    are 1.6 MiB, as Python lists 3.5)."""
    small = peak_writing(clients, 50, tmp_path / "small.npz")
    large = peak_writing(clients, 200, tmp_path / "large.npz")
    assert large < small + 256 * 1024, f"peaks {small / 2**20:.2f}, {large / 2**20:.2f} MiB"
    assert large < 1024 * 1024
    with zipfile.ZipFile(tmp_path / "large.npz") as archive:
        assert archive.getinfo("embedding.npy").file_size > 6400 * 64 * 4
    assert np.load(tmp_path / "large.npz")["embedding"][6399].tolist() == vector(6399, 64)
