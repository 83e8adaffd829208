"""Simulated models: deterministic predictions from the item's bytes, time spent asleep."""

from __future__ import annotations

import re

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
from inferstream.models.errors import UnknownModelError
from inferstream.models.outputs import Embedding
from inferstream.schemas.records import serves


def predict(model: SimModel, items: list[bytes], top_k: int = 3) -> list[Prediction]:
    return model.predict(collate([model.preprocess(item) for item in items]), top_k)


def test_spec_parses_time_and_jitter() -> None:
    assert get_model_spec("sim:ms=12.5,jitter=0.2").sim == SimParams(ms=12.5, jitter=0.2)
    assert get_model_spec("sim:ms=3").sim == SimParams(ms=3.0, jitter=0.0)
    assert get_model_spec("sim:ms=10,slow_after=2000,slow_factor=4").sim == SimParams(
        ms=10.0, slow_after=2000, slow_factor=4.0)


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


def test_a_slowing_model_takes_factor_times_longer_after_so_many_items(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`slow_after=10,slow_factor=4`: the first 10 items 5 ms each, every later one 20 ms,
    also within the batch that crosses the threshold."""
    slept: list[float] = []
    monkeypatch.setattr(sim_module.time, "sleep", slept.append)
    model = load_model("sim:ms=5,slow_after=10,slow_factor=4")
    assert isinstance(model, SimModel)
    for _ in range(4):
        predict(model, [b"a", b"b", b"c", b"d"])
    assert slept == pytest.approx([0.020, 0.020, 0.010 + 0.040, 0.080])
    assert model.items_processed == 16
    steady = load_model("sim:ms=5")
    assert isinstance(steady, SimModel)
    assert predict(steady, [b"a"]) == predict(model, [b"a"])  # same predictions, only slower


def test_a_decode_time_sleeps_in_each_items_fetch_not_in_the_forward_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`decode_ms=20,slower=2`: each fetch sleeps 40 ms; the forward pass only its `ms`."""
    slept: list[float] = []
    monkeypatch.setattr(sim_module.time, "sleep", slept.append)
    model = load_model("sim:ms=1,decode_ms=20,slower=2")
    assert isinstance(model, SimModel) and model.params.decode_ms == 20
    assert model.fetch("a") == b"a" and model.fetch("b", b"inline") == b"inline"
    predict(model, [b"a", b"b"])
    assert slept == pytest.approx([0.040, 0.040, 0.004])


def test_a_gpu_profile_is_a_batch_time_plus_a_time_per_item(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`as=alexnet`: one P40's published throughput, time(n) = 1.072 + 0.05396 n ms;
    `slower=100` stretches it 100 times."""
    slept: list[float] = []
    monkeypatch.setattr(sim_module.time, "sleep", slept.append)
    model = load_model("sim:as=alexnet,slower=100")
    assert isinstance(model, SimModel)
    predict(model, [b"x"] * 32)
    predict(model, [b"x"])
    assert slept == pytest.approx([(1.072 + 32 * 0.05396) * 0.1, (1.072 + 0.05396) * 0.1])
    # the fit against the published figures: 11,464 images/s at batch 32, 791 at batch 1
    assert 32 / ((1.072 + 32 * 0.05396) / 1000) == pytest.approx(11464, rel=0.03)
    assert 1 / ((1.072 + 0.05396) / 1000) == pytest.approx(791, rel=0.15)
    googlenet = get_model_spec("sim:as=googlenet").sim
    assert googlenet is not None and 128 / (googlenet.batch_ms + 128 * googlenet.ms) * 1000 \
        == pytest.approx(6410, rel=0.03)


@pytest.mark.parametrize(("name", "says"), [
    ("sim:as=vgg", "profiles are alexnet, googlenet"),
    ("sim:as=alexnet,ms=3", "as=alexnet sets ms"),
    ("sim:ms=1,slower=0", "slower > 0"),
    ("sim:ms=1,batch_ms=x", "batch_ms='x' is not a number"),
    ("sim:ms=1,embedding=0", "need embedding a whole number >= 1"),
    ("sim:ms=1,embedding=2.5", "need embedding a whole number >= 1"),
])
def test_a_wrong_sim_name_says_what_is_wrong(name: str, says: str) -> None:
    with pytest.raises(UnknownModelError, match=re.escape(says)):
        get_model_spec(name)


def test_an_embedding_sim_model_answers_a_vector_drawn_from_the_item_bytes() -> None:
    """The same bytes give the same float32 vector in any model and batch; others differ."""
    model, other = load_model("sim:ms=0,embedding=1280"), load_model("sim:ms=5,embedding=1280")
    assert isinstance(model, SimModel) and isinstance(other, SimModel)
    assert model.params.embedding == 1280
    cat, dog = predict(model, [b"cat.jpg", b"dog.jpg"])
    assert isinstance(cat, Embedding) and len(cat.vector) == 1280
    assert [float(torch.tensor(v)) for v in cat.vector] == list(cat.vector)  # float32 values
    assert cat != dog and predict(other, [b"dog.jpg"]) == [dog]


def test_a_simulated_task_is_served_by_a_simulated_model_of_the_same_output() -> None:
    assert serves("sim:ms=5", "sim:ms=0,jitter=0.1")
    assert serves("sim:ms=5,embedding=16", "sim:as=alexnet, embedding = 16")
    assert not serves("sim:ms=0", "sim:ms=0,embedding=16")
    assert not serves("sim:ms=0,embedding=8", "sim:ms=0,embedding=16")
    assert not serves("sim:ms=0,embedding=8", "googlenet")
