"""A cold worker serves eager while its forward pass compiles (issue 30.6): the model predicts
at once, the compiled forward pass is swapped in between two batches once built (under
`auto`, where it measured faster), and the report says when; a compile that fails or
measures slower leaves eager; a package already kept is read at once, as without
`background`. Compilers here pickle the module (tests/unit/support/compilers.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from inferstream.models.forward import CACHE_ENV, ForwardReport, prepare_forward
from tests.unit.support.compilers import (
    FailingCompiler,
    InstantCompiler,
    PickledCompiler,
    SlowerCompiler,
    fixed_timings,
)
from tests.unit.support.models import assert_same_predictions, batch_of, tiny_model

WAIT_S = 30.0


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    fixed_timings(monkeypatch)


class Started:
    """A worker start with a background compile: its first report, and the one of the
    compile's choice once `done`."""

    def __init__(self, compiler: PickledCompiler, mode: str = "auto") -> None:
        self.model = tiny_model()
        self.done = threading.Event()
        self.later: ForwardReport | None = None
        self.first = prepare_forward(self.model, compile_mode=mode, max_batch=4,
                                     compiler=compiler, background=self._chosen)

    def _chosen(self, report: ForwardReport) -> None:
        self.later = report
        self.done.set()

    def chosen(self) -> ForwardReport:
        assert self.done.wait(WAIT_S)
        assert self.later is not None
        return self.later


def test_a_cold_start_serves_eager_at_once_and_compiled_once_built() -> None:
    """The build lasts until the model has served eager (not a fixed time it could outlast
    on a busy machine)."""
    built = threading.Event()
    compiler = InstantCompiler(gate=built)
    try:
        start = Started(compiler)
        assert not start.first.compiled and start.first.why == "compiling in the background"
        eager = tiny_model()
        prepare_forward(eager, compile_mode="off", max_batch=4)
        batch = batch_of(start.model, 3)
        assert_same_predictions(start.model.predict(batch, 3), eager.predict(batch, 3))
        assert not start.done.is_set()  # served while the build is still going
    finally:
        built.set()
    report = start.chosen()
    assert report.compiled and report.compile_s > 0 and compiler.builds == 1
    assert "ms/item against" in report.why and "compiled from batch " in report.why
    # the compiled stand-in answers zeros: what serves now is the package
    assert start.model.predict(batch, 1) != eager.predict(batch, 1)


def test_a_restart_reads_the_kept_package_at_once_without_a_thread() -> None:
    compiler = PickledCompiler()
    Started(compiler, "on").chosen()
    again = Started(compiler, "on")
    assert again.first.compiled and again.first.cached
    assert again.model.forward is not again.model.module
    assert not again.done.is_set() and compiler.builds == 1


@pytest.mark.parametrize(("compiler", "why"), [
    (FailingCompiler(), "does not compile: RuntimeError: Compiler: g++ not found"),
    (SlowerCompiler(), "compiled ran slower: ")])
def test_a_background_compile_that_fails_or_runs_slower_leaves_eager(
        compiler: PickledCompiler, why: str) -> None:
    start = Started(compiler)
    report = start.chosen()
    assert not report.compiled
    assert report.why.startswith(why) and report.why.endswith("eager stays")
    assert start.model.forward is start.model.module


def test_two_starts_at_once_compile_once_and_both_serve_meanwhile() -> None:
    compiler = PickledCompiler(build_s=0.5)
    starts = [Started(compiler, "on"), Started(compiler, "on")]
    reports = [start.chosen() for start in starts]
    assert compiler.builds == 1
    assert sorted(report.cached for report in reports) == [False, True]
    assert all(report.compiled for report in reports)
    batch = batch_of(starts[0].model, 2)
    assert_same_predictions(starts[1].model.predict(batch, 3), starts[0].model.predict(batch, 3))
