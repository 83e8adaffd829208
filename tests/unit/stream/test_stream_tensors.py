"""A stream of tensor items (issue 27.5), in memory: a repository model of `tensor` input
labels records whose value is a `.npy` file's bytes, and JSON records whose field holds a
nested array of numbers, as the module labels the same arrays; an array of the wrong shape or
of no numbers is that record's error, never the stream's; so is a record that makes the
model's code raise, alone, whatever records were batched with it."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inferstream.config import Config, WorkerConfig
from inferstream.models import LoadedModel
from inferstream.serving.loader import model_loader
from inferstream.testing import MemoryBroker
from tests.unit.stream.test_stream_memory import IN, decoded, outputs, run_members, streams
from tests.unit.support.memory import make_config as base_config
from tests.unit.support.running import Running

NAME = "vectors"
SHAPE = (2, 3)
LABELS = ("low", "middle", "high")
CARD = f'[input]\nkind = "tensor"\nshape = {list(SHAPE)}\n[serving]\ncompile = "off"\n'


def classifier() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, len(LABELS))).eval()


@pytest.fixture(scope="module")
def module() -> torch.nn.Module:
    return classifier()


@pytest.fixture
def model(tmp_path: Path, module: torch.nn.Module) -> LoadedModel:
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        return served(tmp_path, torch.jit.trace(module, torch.rand(2, *SHAPE)))


def served(tmp_path: Path, program: torch.jit.ScriptModule) -> LoadedModel:
    """Version 1 of NAME in a repository (`program`, TorchScript), loaded as a stream member
    loads it."""
    folder = tmp_path / "repo" / NAME
    (folder / "1").mkdir(parents=True)
    (folder / "model.toml").write_text(CARD, encoding="utf-8")
    (folder / "labels.txt").write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    out = io.BytesIO()
    torch.jit.save(program, out)
    (folder / "1" / "model.pt").write_bytes(out.getvalue())
    settings = WorkerConfig(models=(NAME,), model_repository=str(tmp_path / "repo"),
                            compile="off")
    return model_loader(settings, "cpu")(NAME)


def make_config(**stream: Any) -> Config:
    return base_config(worker={"models": (NAME,), "worker_id": "s1", "calibration_items": 0},
                       stream={"input_topic": IN, "output_topic": "labels", **stream})


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def label_of(module: torch.nn.Module, array: np.ndarray) -> str:
    with torch.no_grad():
        scores = module(torch.from_numpy(array.astype(np.float32))[None])
    return LABELS[int(scores.argmax())]


def rows(count: int) -> list[np.ndarray]:
    generator = np.random.default_rng(7)
    return [generator.standard_normal(SHAPE).astype(np.float32) for _ in range(count)]


def test_npy_bytes_records_get_the_modules_labels_and_version(
        broker: MemoryBroker, running: Running, model: LoadedModel,
        module: torch.nn.Module) -> None:
    streams(broker)
    arrays = rows(4)
    for i, array in enumerate(arrays):
        broker.produce(IN, i % 3, f"a{i}".encode(), npy(array))
    broker.produce(IN, 0, b"flat", npy(np.zeros(6, dtype=np.float32)))
    run_members(running, make_config(input_format="bytes"), model)

    found = {r.key: decoded(r) for r in outputs(broker)}
    for i, array in enumerate(arrays):
        line = found[f"a{i}".encode()]
        assert line["status"] == "ok" and (line["model"], line["model_version"]) == (NAME, "1")
        assert line["top_k"][0]["label"] == label_of(module, array)
    assert found[b"flat"]["status"] == "error"
    assert "a tensor of shape [6] float32; the model takes [2, 3] float32" in \
        found[b"flat"]["error"]


def test_json_records_whose_field_holds_a_nested_array_get_the_modules_labels(
        broker: MemoryBroker, running: Running, model: LoadedModel,
        module: torch.nn.Module) -> None:
    streams(broker)
    arrays = rows(3)
    values = {f"j{i}".encode(): {"id": i, "features": array.tolist()}
              for i, array in enumerate(arrays)}
    values[b"ints"] = {"features": [[1, 2, 3], [4, 5, 6]]}  # numbers of another dtype
    values[b"short"] = {"features": [[1.0, 2.0, 3.0]]}
    values[b"words"] = {"features": [["a", "b", "c"], ["d", "e", "f"]]}
    for i, (key, value) in enumerate(values.items()):
        broker.produce(IN, i % 3, key, json.dumps(value).encode())
    run_members(running, make_config(input_format="json", field="features"), model)

    found = {r.key: decoded(r) for r in outputs(broker)}
    assert len(found) == len(values)
    for i, array in enumerate(arrays):
        assert found[f"j{i}".encode()]["top_k"][0]["label"] == label_of(module, array)
    assert found[b"ints"]["top_k"][0]["label"] == label_of(
        module, np.arange(1, 7, dtype=np.float32).reshape(SHAPE))
    assert "a tensor of shape [1, 3]" in found[b"short"]["error"]
    assert found[b"words"]["error"] == 'value "a" at [0, 0] is not a number'


class Raiser(torch.nn.Module):
    """The classifier, but raising (in TorchScript) where an item's first number is over 100."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = classifier()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x[:, 0, 0] > 100).any()):
            raise ValueError("feature 0 out of range")
        return self.inner(x)


def test_a_record_that_makes_the_model_raise_fails_alone_in_one_line(
        broker: MemoryBroker, running: Running, tmp_path: Path, module: torch.nn.Module) -> None:
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        model = served(tmp_path, torch.jit.script(Raiser().eval()))
    streams(broker)
    arrays = rows(6)
    poison = np.full(SHAPE, 1000, dtype=np.float32)
    for i, array in enumerate([*arrays[:3], poison, *arrays[3:]]):
        broker.produce(IN, 0, f"r{i}".encode(), npy(array))
    run_members(running, make_config(input_format="bytes"), model)

    found = {r.key: decoded(r) for r in outputs(broker)}
    assert found.pop(b"r3")["error"] == "inference failed: ValueError: feature 0 out of range"
    assert [line["status"] for line in found.values()] == ["ok"] * 6
    assert sorted(line["top_k"][0]["label"] for line in found.values()) == \
        sorted(label_of(module, array) for array in arrays)
