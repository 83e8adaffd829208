"""A compiled forward pass predicts what the eager one does for every batch size, each size
class compiled at load (issue 16.3), and so does the one a restart reads from the cache (issue
26.4). No broker: it is here because compiling takes about 20 s on a CPU, too long for the unit
suite (tests/unit/models/test_forward.py and test_forward_cache.py have the rest)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from torch._dynamo.utils import counters

from inferstream.models.forward import CACHE_ENV, prepare_forward
from tests.unit.support.models import assert_same_predictions, batch_of, tiny_model


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("channels_last", [True, False])
def test_compiled_forward_predicts_what_eager_does_for_every_batch_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, channels_last: bool) -> None:
    # contiguous float32 batches reach the graph as collated, channels-last ones as copies
    # made under inference_mode: dynamo tells the two apart, and both must be compiled
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "compiled"))
    model, eager = tiny_model(), tiny_model()
    prepare_forward(eager, compile_mode="off", channels_last=channels_last)
    report = prepare_forward(model, compile_mode="on", max_batch=8, torch_threads=1,
                             channels_last=channels_last)
    assert report.compiled, report.why
    assert report.compile_s > 0
    assert model.forward is not model.module
    graphs = counters["stats"]["unique_graphs"]
    with ThreadPoolExecutor(1) as inference:  # as the worker's inference thread calls it
        for size in (8, 5, 3, 2, 1):
            batch = batch_of(model, size)
            got = inference.submit(model.predict, batch, 3).result()
            assert_same_predictions(got, eager.predict(batch, top_k=3))
    assert counters["stats"]["unique_graphs"] == graphs  # every size class compiled at load


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_restart_reads_the_compiled_package_and_predicts_what_the_first_start_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 26.4: the second load is a restarted worker's, with the cache the first one filled
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "compiled"))
    first, second = tiny_model(), tiny_model()
    cold = prepare_forward(first, compile_mode="on", max_batch=8, torch_threads=1)
    warm = prepare_forward(second, compile_mode="on", max_batch=8, torch_threads=1)
    assert cold.compiled and not cold.cached, cold.why
    assert warm.compiled and warm.cached, warm.why
    assert "from the cache" in warm.describe()
    for size in (8, 3, 1):
        batch = batch_of(first, size)
        assert_same_predictions(second.predict(batch, 3), first.predict(batch, 3))
