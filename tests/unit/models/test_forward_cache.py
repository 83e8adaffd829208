"""The compiled forward pass kept between starts (issue 26.4): a restarted worker reads it
from the cache and predicts what the first start did; a change of what it was compiled from
compiles again; a bad entry is compiled again, never a crash; two workers starting at once
compile once. Compilers here pickle the module (tests/unit/support/compilers.py); the real
AOTInductor package is tests/integration/test_forward_compile.py."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from inferstream.models import TorchModel
from inferstream.models.forward import CACHE_ENV, ForwardReport, prepare_forward
from inferstream.models.packages import KEEP_PER_MODEL, PACKAGE, SUBDIR
from tests.unit.support.compilers import (
    BusyFirstCompiler,
    InstantCompiler,
    PickledCompiler,
    SlowerCompiler,
    fixed_timings,
)
from tests.unit.support.models import assert_same_predictions, batch_of, tiny_model


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The compile cache of these tests; its packages are under `SUBDIR`; eager against
    compiled timed by the figures of `fixed_timings`."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fixed_timings(monkeypatch)
    return tmp_path / SUBDIR


def start(compiler: PickledCompiler, model: TorchModel | None = None,
          **settings: object) -> tuple[TorchModel, ForwardReport]:
    """One worker start: a freshly built model, its forward pass prepared."""
    model = model or tiny_model()
    options: dict[str, object] = {"compile_mode": "on", "max_batch": 4, **settings}
    return model, prepare_forward(model, compiler=compiler, **options)  # type: ignore[arg-type]


def test_a_restart_reads_the_compiled_forward_from_the_cache_and_predicts_the_same(
        cache: Path) -> None:
    compiler = PickledCompiler()
    first, cold = start(compiler)
    second, warm = start(compiler)
    assert (cold.compiled, cold.cached, warm.compiled, warm.cached) == (True, False, True, True)
    assert compiler.builds == 1
    assert "from the cache" in warm.describe() and "to compile" in cold.describe()
    assert warm.compile_s == 0 and cold.compile_s > 0
    assert second.forward is not second.module
    batch = batch_of(first, 5)
    assert_same_predictions(second.predict(batch, 3), first.predict(batch, 3))


def test_where_auto_kept_compiled_a_restart_reads_its_figures_instead_of_timing(
        cache: Path) -> None:
    compiler = InstantCompiler()
    _, cold = start(compiler, compile_mode="auto")
    second, warm = start(compiler, compile_mode="auto")
    assert cold.compiled and warm.compiled and warm.cached
    assert second.forward is not second.module
    assert (warm.eager_ms_per_item, warm.compiled_ms_per_item) == (
        cold.eager_ms_per_item, cold.compiled_ms_per_item)
    assert "when compiled; from the cache" in warm.why


def test_where_auto_kept_eager_a_restart_times_both_again(cache: Path) -> None:
    # a busy neighbour at the first start must not keep a worker eager for good
    compiler = SlowerCompiler()
    _, cold = start(compiler, compile_mode="auto")
    second, warm = start(compiler, compile_mode="auto")
    assert not cold.compiled and not warm.compiled and warm.cached
    assert second.forward is second.module
    assert warm.why.startswith("compiled ran slower: ") and "when compiled" not in warm.why
    assert compiler.builds == 1


def test_a_restart_that_times_compiled_faster_keeps_it_for_the_next(cache: Path) -> None:
    compiler = BusyFirstCompiler()
    _, cold = start(compiler, compile_mode="auto")
    _, retimed = start(compiler, compile_mode="auto")
    third, warm = start(compiler, compile_mode="auto")
    assert not cold.compiled
    assert retimed.compiled and "when compiled" not in retimed.why
    assert warm.compiled and "when compiled; from the cache" in warm.why
    assert (warm.eager_ms_per_item, warm.compiled_ms_per_item) == (
        retimed.eager_ms_per_item, retimed.compiled_ms_per_item)
    assert third.forward is not third.module


def retrained() -> TorchModel:
    """The tiny model with other weights."""
    model = tiny_model()
    with torch.no_grad():
        next(model.module.parameters()).add_(1.0)
    return model


def test_other_weights_or_settings_compile_again(cache: Path) -> None:
    compiler = PickledCompiler()
    start(compiler)
    for changed in ({"channels_last": False}, {"max_batch": 8}, {"precision": "bf16"}):
        _, report = start(compiler, **changed)
        assert not report.cached, changed
    other, report = start(compiler, retrained())
    assert not report.cached
    assert compiler.builds == 5
    # each key keeps its entry: a worker of the other weights predicts as that one did
    again, report = start(compiler, retrained())
    assert report.cached
    batch = batch_of(other, 3)
    assert_same_predictions(again.predict(batch, 3), other.predict(batch, 3))
    _, report = start(compiler, precision="bf16")
    assert report.cached


def test_an_entry_that_cannot_be_read_is_compiled_again(
        cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    compiler = PickledCompiler()
    first, _ = start(compiler)
    (package,) = cache.glob(f"*/{PACKAGE}")
    package.write_bytes(b"half a package")
    with caplog.at_level(logging.WARNING):
        second, report = start(compiler)
    assert report.compiled and not report.cached
    assert "unusable" in caplog.text and "compiling again" in caplog.text
    batch = batch_of(first, 3)
    assert_same_predictions(second.predict(batch, 3), first.predict(batch, 3))
    _, report = start(compiler)
    assert report.cached


def test_two_workers_starting_at_once_compile_once(cache: Path) -> None:
    compiler = PickledCompiler(build_s=0.2)
    models = [tiny_model(), tiny_model()]  # torch's random generator is not for threads
    with ThreadPoolExecutor(2) as starts:
        results = list(starts.map(lambda model: start(compiler, model), models))
    assert compiler.builds == 1
    assert sorted(report.cached for _, report in results) == [False, True]
    batch = batch_of(results[0][0], 4)
    assert_same_predictions(results[1][0].predict(batch, 3), results[0][0].predict(batch, 3))
    assert not list(cache.glob(".*"))  # no staging directory left behind


def test_each_model_keeps_its_newest_entries(cache: Path) -> None:
    compiler = PickledCompiler()
    for max_batch in range(1, KEEP_PER_MODEL + 3):
        start(compiler, max_batch=max_batch)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == KEEP_PER_MODEL
    _, report = start(compiler, max_batch=KEEP_PER_MODEL + 2)
    assert report.cached


class RowsCompiler(PickledCompiler):
    """Records the rows of each example it is given to build from."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        self.rows.append(int(example.shape[0]))
        super().build(module, example, path)


@pytest.mark.parametrize("max_batch", [1, 2, 6])
def test_the_package_is_built_from_a_batch_of_max_batch_rows(cache: Path,
                                                             max_batch: int) -> None:
    """Its batch dimension is bounded by the example's rows (`package_build`): a model that
    takes batches of 1 alone is built from 1 row, not 2, and an export's `Dim(max=N)` is
    never exceeded (the worker's max_batch stays within it)."""
    compiler = RowsCompiler()
    _, report = start(compiler, max_batch=max_batch)
    assert report.compiled and compiler.rows == [max_batch]
