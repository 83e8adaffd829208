"""How a model's forward pass runs (issue 16.3, 16.5): precision, channels-last, compiled or
eager with a measured fall-back; real labels hold in every precision. That a compiled forward
predicts what eager does is tests/integration/test_forward_compile.py (compiling takes 20 s);
the compiled forward pass kept between starts is test_forward_cache.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from skimage import data as photos

from inferstream.models import TorchModel, load_model
from inferstream.models.collate import collate
from inferstream.models.forward import (
    CACHE_ENV,
    prepare_forward,
    resolve_precision,
    warm_up_sizes,
)
from tests.unit.support.compilers import FailingCompiler, SlowerCompiler, fixed_timings
from tests.unit.support.models import assert_same_predictions, batch_of, tiny_model
from tests.unit.support.photos import CAT_CLASSES, encode


def test_auto_precision_is_half_on_cuda_and_full_on_a_cpu() -> None:
    assert resolve_precision("auto", "cuda:1") == "fp16"
    assert resolve_precision("auto", "cpu") == "fp32"
    assert resolve_precision("bf16", "cpu") == "bf16"


def test_warm_up_covers_each_halving_down_to_one() -> None:
    assert warm_up_sizes(32) == [32, 16, 8, 4, 2, 1]
    assert warm_up_sizes(12) == [12, 6, 3, 1]
    assert warm_up_sizes(1) == [1]


def test_off_is_eager_channels_last_in_the_chosen_precision() -> None:
    model = tiny_model()
    report = prepare_forward(model, precision="bf16", compile_mode="off")
    assert (report.compiled, report.precision, report.channels_last) == (False, "bf16", True)
    assert "eager (compile = off), bf16, channels-last" in report.describe()
    inputs = model.to_inputs(batch_of(model, 2))
    assert inputs.dtype == torch.bfloat16
    assert inputs.is_contiguous(memory_format=torch.channels_last)
    assert model.forward is model.module
    assert len(model.predict(batch_of(model, 3), top_k=5)) == 3


def test_a_model_that_does_not_compile_runs_eager_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "torch's"))  # the setting comes first
    model = tiny_model()
    expected = model.predict(batch_of(model, 4), top_k=3)
    report = prepare_forward(model, compile_mode="on", cache_dir=str(tmp_path / "cache"),
                             compiler=FailingCompiler())
    assert not report.compiled
    assert report.why == "does not compile: RuntimeError: Compiler: g++ not found"
    assert model.forward is model.module
    assert_same_predictions(model.predict(batch_of(model, 4), top_k=3), expected)
    assert (tmp_path / "cache").is_dir()
    assert Path(os.environ[CACHE_ENV]) == tmp_path / "cache"


def test_auto_keeps_eager_where_compiled_measures_slower(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fixed_timings(monkeypatch)
    model = tiny_model()
    report = prepare_forward(model, compile_mode="auto", max_batch=4, compiler=SlowerCompiler())
    assert not report.compiled
    assert report.why.startswith("compiled ran slower: ")
    assert report.eager_ms_per_item is not None and report.compiled_ms_per_item is not None
    assert report.compiled_ms_per_item > report.eager_ms_per_item
    assert model.forward is model.module


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_bundled_photos_keep_their_labels_in_every_precision(precision: str) -> None:
    model = load_model("efficientnet_lite0")
    assert isinstance(model, TorchModel)
    prepare_forward(model, precision=precision, compile_mode="off")
    images = [photos.chelsea(), photos.coffee(), photos.rocket(), photos.camera()]
    batch = collate([model.preprocess(encode(image, quality=92)) for image in images])
    cat, coffee, rocket, camera = (p[0] for p in model.predict(batch, top_k=5))
    assert cat[0] in CAT_CLASSES
    assert coffee[0] == 967  # espresso
    assert rocket[0] in {657, 744}  # missile, projectile
    assert camera[0] == 872  # tripod


def test_a_simulated_model_has_nothing_to_prepare() -> None:
    report = prepare_forward(load_model("sim:ms=1"), compile_mode="on", precision="bf16")
    assert not report.compiled
    assert report.describe() == "forward of sim:ms=1: simulated, nothing to prepare"
