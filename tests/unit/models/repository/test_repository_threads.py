"""Versions of repository models loaded on several threads at once, as the members of one
worker process (`--members N`) load a new version each on its own thread: torch.export's
loader keeps its state in a module global (pytorch#195099), and a second load while one was
under way failed (`AssertionError: _CURRENT_DESERIALIZER is already set`), that member then
never serving the version."""

from __future__ import annotations

import threading

import pytest
import torch
from torch._export.serde.serialize import GraphModuleDeserializer

from inferstream.models.repository import open_repository
from inferstream.models.repository.loaders import Program, load_program
from tests.unit.models.repository.conftest import TENSOR_CARD, MakeRepository, Models


def test_two_threads_load_an_exported_version_at_once(
        models: Models, make_repository: MakeRepository,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repository("vectors", TENSOR_CARD, {"1/model.pt2": models.tensor.pt2})
    version = open_repository(str(root)).model("vectors").newest()
    inside, released = threading.Event(), threading.Event()
    deserialize_graph = GraphModuleDeserializer.deserialize_graph

    def held(self: GraphModuleDeserializer, *args: object, **kwargs: object) -> object:
        if not inside.is_set():  # the first load stays inside until the second has started
            inside.set()
            released.wait(30)
        return deserialize_graph(self, *args, **kwargs)

    monkeypatch.setattr(GraphModuleDeserializer, "deserialize_graph", held)
    loaded: dict[str, Program | Exception] = {}

    def load(name: str) -> None:
        try:
            loaded[name] = load_program(version, torch.device("cpu"), allow_python=False)
        except Exception as exc:  # what the second member logged, serving on without it
            loaded[name] = exc

    first = threading.Thread(target=load, args=("first",))
    first.start()
    assert inside.wait(30)
    second = threading.Thread(target=load, args=("second",))
    second.start()
    second.join(1)  # it failed at once; now it waits for the first
    released.set()
    first.join(30)
    second.join(30)
    assert {name: type(program).__name__ for name, program in loaded.items()} == \
        {"first": "Program", "second": "Program"}
