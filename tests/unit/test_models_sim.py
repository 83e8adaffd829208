"""Simulated models: deterministic predictions from the item's bytes, time spent asleep."""

from __future__ import annotations

import pytest
import torch

from inferstream.models import (
    Prediction,
    SimModel,
    SimParams,
    get_model_spec,
    load_model,
)
from inferstream.models import sim as sim_module
from inferstream.models.collate import collate


def predict(model: SimModel, items: list[bytes], top_k: int = 3) -> list[Prediction]:
    return model.predict(collate([model.preprocess(item) for item in items]), top_k)


def test_spec_parses_time_and_jitter() -> None:
    assert get_model_spec("sim:ms=12.5,jitter=0.2").sim == SimParams(ms=12.5, jitter=0.2)
    assert get_model_spec("sim:ms=3").sim == SimParams(ms=3.0, jitter=0.0)


def test_same_bytes_same_prediction_across_models() -> None:
    first, second = load_model("sim:ms=0"), load_model("sim:ms=0,jitter=0.5")
    assert isinstance(first, SimModel) and isinstance(second, SimModel)
    items = [b"cat.jpg", b"dog.jpg", bytes(range(256))]
    assert predict(first, items) == predict(second, items)
    assert predict(first, items) == predict(first, list(reversed(items)))[::-1]


def test_prediction_shape() -> None:
    model = load_model("sim:ms=0")
    assert isinstance(model, SimModel)
    cat, dog = predict(model, [b"cat.jpg", b"dog.jpg"], top_k=5)
    assert cat != dog
    ids = [c for c, _, _ in cat]
    assert len(set(ids)) == 5
    assert all(model.labels[c] == label for c, label, _ in cat)
    assert sum(score for _, _, score in cat) <= 1.0


def test_preprocess_is_tiny_and_accepts_anything() -> None:
    model = load_model("sim:ms=0")
    tensor = model.preprocess(b"\x00not an image at all")
    assert tensor.numel() == 1
    assert tensor.dtype == torch.int64
    assert model.fetch("items/0001") == b"items/0001"
    assert model.fetch("ignored", b"inline") == b"inline"


def test_time_asked_for_is_ms_per_item_within_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(sim_module.time, "sleep", slept.append)
    model = load_model("sim:ms=10,jitter=0.2")
    assert isinstance(model, SimModel)
    for _ in range(20):
        predict(model, [b"a", b"b", b"c", b"d"])
    assert all(0.032 <= s <= 0.048 for s in slept)  # 4 items x 10 ms, +-20%
