"""How a loaded model runs its forward pass: its precision, its memory format, compiled or eager
(and, `prepare_device_decode`, whether its JPEGs are decoded on its device).

Chosen per device when a worker loads a model (`[worker] precision`, `channels_last`, `compile`)
and logged in one line:

- **Precision.** `auto` is float16 on CUDA (tensor cores) and float32 on a CPU, where results
  stay those of the model as trained; `bf16` is the CPU's fast choice where it computes bfloat16
  natively (AVX512-BF16 or AMX: about 2x faster here, BENCHMARKS.md P1). Labels of the bundled
  photos hold in every precision (tests/unit/models/test_forward.py).
- **Channels-last** weights and batches: oneDNN's and cuDNN's fast convolutions want them
  (googlenet's eager CPU forward pass 32 -> 17 ms per image).
- **Compiled**: an AOTInductor package (`torch.export`, then Inductor with frozen weights:
  batch norm folded into the convolutions, weights prepacked for oneDNN on a CPU). The whole
  graph runs in one C++ call without the GIL, where eager PyTorch takes the GIL back between
  operators and waits for it behind the event loop and the decode threads (P1: next to one busy
  Python thread, googlenet's eager forward pass ran 4.2x slower, the compiled one 1.9x, the
  share of the two cores that thread took). The batch dimension is dynamic: one package serves
  every batch size, each size class run once before the package is kept, so serving never
  stops to compile. The package is kept in the compile cache dir (`models.packages`), so a
  restarted worker loads it in about a second instead of compiling again (15-60 s on a CPU);
  torch.compile's own caches cannot hold a CPU graph with oneDNN-packed weights. `auto` times
  one batch compiled against eager when the package is built and keeps the faster (the cache
  keeps the figures); a model that does not compile (no C++ compiler, an operator Inductor or
  torch.export lacks) runs eager, and the line says why. A worker's first start does not wait
  for it (`background`): the model serves eager while the package is built in a child
  process at a lower priority, and the chosen forward pass is swapped in between two
  batches, in a second line.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from inferstream.models.base import LoadedModel, TorchModel
from inferstream.models.collate import collate
from inferstream.models.device_decode import DeviceDecoder, choose_decoding
from inferstream.models.packages import (
    PACKAGE,
    SUBDIR,
    AotiCompiler,
    CompiledForward,
    Compiler,
    Forward,
    PackageCache,
    PackageKey,
    Timings,
    package_key,
)
from inferstream.models.preprocess import ImagePreprocessor
from inferstream.models.timing import best_seconds

log = logging.getLogger(__name__)

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: compiled is kept under `auto` unless it measured this much slower than eager: a tie goes to
#: compiled, which leaves the GIL to the decode threads and the event loop
COMPILED_TOLERANCE = 1.05
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
#: nice increment of a background build: serving eager keeps the cores it wants, the build
#: takes the rest (a build the worker waits for runs at the worker's own priority)
BACKGROUND_NICE = 10


@dataclass(frozen=True)
class _Job:
    """What `_compile` compiles for, besides the model."""

    mode: str
    precision: str
    channels_last: bool
    max_batch: int
    root: Path


@dataclass(frozen=True)
class ForwardReport:
    """What `prepare_forward` chose for a model, and the figures it chose by."""

    model: str
    precision: str
    channels_last: bool
    compiled: bool
    why: str
    compile_s: float = 0.0
    eager_ms_per_item: float | None = None
    compiled_ms_per_item: float | None = None
    #: the compiled forward pass was read from the cache, in `load_s` seconds
    cached: bool = False
    load_s: float = 0.0

    def describe(self) -> str:
        if not self.precision:  # nothing was prepared
            return f"forward of {self.model}: {self.why}"
        layout = "channels-last" if self.channels_last else "contiguous"
        head = "compiled" if self.compiled else "eager"
        return f"forward of {self.model}: {head} ({self.why}), {self.precision}, {layout}"


def default_cache_dir() -> str:
    """Where compiled forward passes are kept: `$XDG_CACHE_HOME/inferstream/torch-compile`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "inferstream" / "torch-compile")


def resolve_precision(setting: str, device: torch.device | str) -> str:
    """`auto` to fp16 on CUDA and fp32 elsewhere; any other setting as it is."""
    if setting != "auto":
        return setting
    return "fp16" if torch.device(device).type == "cuda" else "fp32"


def native_bf16_cpu() -> bool:
    """Whether this CPU computes bfloat16 in hardware (else torch emulates it, slowly)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, probe, lambda: False)()) for probe in probes)


def prepare_forward(model: LoadedModel, *, precision: str = "auto", channels_last: bool = True,
                    compile_mode: str = "auto", max_batch: int = 32, torch_threads: int = 0,
                    cache_dir: str = "", compiler: Compiler | None = None,
                    background: Callable[[ForwardReport], None] | None = None
                    ) -> ForwardReport:
    """Set `model`'s precision, memory format and forward (compiled or eager); blocks for the
    compile (seconds to minutes the first time, a second or two from the cache in `cache_dir`)
    unless `background` is given: then a package not in the cache is built on a thread while
    the model serves eager, and `background` gets the report of its choice, from that thread.
    `torch_threads` > 0 is set on the calling thread first: a package is kept per thread count,
    which Inductor's CPU kernels are compiled for."""
    if not isinstance(model, TorchModel):
        return ForwardReport(model.name, "", False, False, "simulated, nothing to prepare")
    if torch_threads > 0:
        torch.set_num_threads(torch_threads)
    chosen = resolve_precision(precision, model.device)
    if chosen == "bf16" and model.device.type == "cpu" and not native_bf16_cpu():
        log.warning("precision bf16: this CPU has no native bfloat16 (AVX512-BF16 or AMX); "
                    "torch emulates it, slower than fp32")
    model.dtype = _DTYPES[chosen]
    model.module = model.module.to(dtype=model.dtype)
    if channels_last:
        model.memory_format = torch.channels_last
        model.module = model.module.to(memory_format=torch.channels_last)
    model.forward = model.module
    if compile_mode == "off":
        return ForwardReport(model.name, chosen, channels_last, False, "compile = off")
    job = _Job(compile_mode, chosen, channels_last, max_batch, _use_cache_dir(cache_dir))
    compiler = compiler or AotiCompiler(nice=0 if background is None else BACKGROUND_NICE)
    compilation = Compilation(model, job, compiler,
                              partial(ForwardReport, model.name, chosen, channels_last))
    return compilation.now() if background is None else compilation.soon(background)


def prepare_device_decode(model: LoadedModel, setting: str, decode_threads: int,
                          max_batch: int) -> str | None:
    """Decode `model`'s JPEGs on its device where `setting` (auto, on, off) says so
    (`models.device_decode`); the line that says what was chosen, None where nothing was."""
    if setting == "off" or not isinstance(model, TorchModel):
        return None
    preprocessor = model.preprocessor
    if not isinstance(preprocessor, ImagePreprocessor):
        return None
    if setting == "auto" and model.device.type != "cuda":
        return None  # on a CPU device the decode threads are the CPU path, overlapped
    decoder = DeviceDecoder(preprocessor.spec, model.device, preprocessor,
                            preprocessor.max_pixels)
    if setting == "on":
        model.decoder = decoder
        return f"JPEGs of {model.name} decoded on {model.device} (decode_on_device = on)"
    choice = choose_decoding(decoder, lambda batch: model.predict(batch, 1), decode_threads,
                             max_batch)
    model.decoder = decoder if choice.on_device else None
    where = model.device if choice.on_device else "the decode threads"
    return f"JPEGs of {model.name} decoded on {where}: {choice.why}"


def warm_up_sizes(max_batch: int) -> list[int]:
    """Batch sizes that compile every size class a batch of 1..max_batch falls in: the
    largest first (it marks the batch dimension dynamic), then halving down to 1."""
    sizes, size = [], max_batch
    while size > 1:
        sizes.append(size)
        size //= 2
    return [*sizes, 1]


class Compilation:
    """One model's compiled forward pass, from the cache or built, and the choice of it;
    `report` completes the model's ForwardReport from `compiled` and `why` on."""

    def __init__(self, model: TorchModel, job: _Job, compiler: Compiler,
                 report: Callable[..., ForwardReport]) -> None:
        self.model, self.job, self.compiler, self.report = model, job, compiler, report
        self.eager = model.forward
        self.cache = PackageCache(job.root, partial(_checked_load, compiler, model))

    def now(self) -> ForwardReport:
        """Read or build the package (blocks for the build), then choose."""
        try:
            key = self._key()
            with self.cache.locked(key):  # a second worker starting at once waits for it
                compiled = self.cache.read(key) or self._build(key)
            forward, report = self._choose(key, compiled)
        except Exception as exc:  # any failure to compile leaves the model eager
            forward, report = self.eager, self._failed(exc)
        self.model.forward = forward
        return report

    def soon(self, done: Callable[[ForwardReport], None]) -> ForwardReport:
        """The package from the cache where it is there, as `now`; else eager at once and
        the package read or built on a thread, swapped in between two batches when chosen,
        and `done` told from that thread."""
        try:
            key = self._key()
            with self.cache.locked(key, wait=False) as free:  # taken: another is building
                compiled = self.cache.read(key) if free else None
            if compiled is not None:
                forward, report = self._choose(key, compiled)
                self.model.forward = forward
                return report
        except Exception as exc:
            self.model.forward = self.eager
            return self._failed(exc)
        counted = CountedForward(self.eager)
        self.model.forward = counted
        threading.Thread(target=self._later, args=(key, counted, done), daemon=True,
                         name=f"inferstream-compile-{self.model.name}").start()
        return self.report(False, "compiling in the background")

    def _later(self, key: PackageKey, counted: CountedForward,
               done: Callable[[ForwardReport], None]) -> None:
        started = time.perf_counter()
        try:
            with self.cache.locked(key):
                compiled = self.cache.read(key) or self._build(key)
            forward, report = self._choose(key, compiled)
        except Exception as exc:
            forward, report = self.eager, self._failed(exc)
        batches = counted.batches
        if self.model.forward is counted:  # else prepared again meanwhile: that one stays
            self.model.forward = forward
        after = (f"compiled from batch {batches + 1}" if forward is not self.eager
                 else "eager stays")
        report = dataclasses.replace(report, why=(
            f"{report.why}; eager while compiling ({time.perf_counter() - started:.1f} s, "
            f"{batches} batches), {after}"))
        log.info("%s", report.describe())
        done(report)

    def _key(self) -> PackageKey:
        job = self.job
        return package_key(self.model.module, self.model.name, self.model.device,
                           precision=job.precision, channels_last=job.channels_last,
                           max_batch=job.max_batch)

    def _failed(self, exc: Exception) -> ForwardReport:
        first_line = (str(exc).strip().splitlines() or [""])[0][:160]
        return self.report(False, f"does not compile: {type(exc).__name__}: {first_line}")

    def _choose(self, key: PackageKey, compiled: CompiledForward
                ) -> tuple[Forward, ForwardReport]:
        """The forward pass to serve and its report: compiled under `on`; under `auto` the
        one that measured faster (a tie goes to compiled)."""
        load_s, job = compiled.load_s, self.job
        how = (f"{compiled.timings.compile_s:.1f} s to compile" if load_s is None
               else f"from the cache, {load_s:.1f} s to load")
        done = partial(self.report, compile_s=compiled.timings.compile_s if load_s is None
                       else 0.0, cached=load_s is not None, load_s=load_s or 0.0)
        if job.mode == "on":
            return compiled.forward, done(True, f"compile = on; {how}")
        timings, timed_again = _timings(self.model, job, compiled, self.eager)
        if timed_again:  # the next start reads these
            self.cache.record(key, timings)
        eager_ms = timings.eager_ms_per_item or 0.0
        compiled_ms = timings.compiled_ms_per_item or 0.0
        when = " when compiled" if not timed_again and load_s is not None else ""
        figures = f"{compiled_ms:.1f} ms/item against {eager_ms:.1f} eager{when}; {how}"
        slower = compiled_ms > eager_ms * COMPILED_TOLERANCE
        report = done(not slower, f"compiled ran slower: {figures}" if slower else figures,
                      eager_ms_per_item=eager_ms, compiled_ms_per_item=compiled_ms)
        return (self.eager if slower else compiled.forward), report

    def _build(self, key: PackageKey) -> CompiledForward:
        """Compile the model's package, run every size class through it, time it (`auto`)
        and keep it in the cache; `load_s` None: built, not loaded."""
        model, job = self.model, self.job
        log.info("compiling the forward pass of %s for %s, batch sizes %s (the first time can "
                 "take minutes; kept in %s for the next start)", model.name, model.device,
                 ", ".join(map(str, warm_up_sizes(job.max_batch))), self.cache.root)
        started = time.perf_counter()
        with self.cache.staging(key) as staging:
            # as many rows as a batch may have (`package_build`: a dynamic batch dimension up
            # to that, or a batch of 1 alone where that is all it may be)
            example = collate([model.synthetic_item()] * job.max_batch, model.device)
            self.compiler.build(model.module, model.to_inputs(example), staging / PACKAGE)
            forward = self.compiler.load(staging / PACKAGE, model.device)
            _warm_up(model, forward, job.max_batch)
            compile_s = time.perf_counter() - started
            timings = Timings(compile_s)
            if job.mode != "on":
                timings = Timings(compile_s,
                                  *_time_both(model, self.eager, forward, job.max_batch))
            self.cache.publish(key, staging, timings)
        return CompiledForward(forward, timings, None)


class CountedForward:
    """The eager forward pass while the compiled one is built, counting its batches."""

    def __init__(self, forward: Forward) -> None:
        self.forward = forward
        self.batches = 0

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        self.batches += 1
        return self.forward(inputs)


def _timings(model: TorchModel, job: _Job, compiled: CompiledForward,
             eager: Forward) -> tuple[Timings, bool]:
    """What `auto` chooses by, and whether it was timed again now: the figures of the
    package's build, timed again where it has none (a `compile on` start's) or eager won and
    it came from the cache (a busy neighbour at the first start may have made compiled look
    slower)."""
    timings = compiled.timings
    eager_ms, compiled_ms = timings.eager_ms_per_item, timings.compiled_ms_per_item
    if eager_ms is not None and compiled_ms is not None and (
            compiled.load_s is None or compiled_ms <= eager_ms * COMPILED_TOLERANCE):
        return timings, False
    return Timings(timings.compile_s,
                   *_time_both(model, eager, compiled.forward, job.max_batch)), True


def _checked_load(compiler: Compiler, model: TorchModel, path: Path) -> Forward:
    """The package at `path`, which has run one item (a package that loads but fails at
    its first batch is to be built again, not served)."""
    forward = compiler.load(path, model.device)
    with torch.inference_mode():
        forward(model.to_inputs(collate([model.synthetic_item()], model.device)))
    return forward


def _warm_up(model: TorchModel, forward: Forward, max_batch: int) -> None:
    """Run every size class through `predict`, the way batches will come, before the package
    is kept: one that fails at some batch size is not kept, and the model runs eager."""
    serving = _serving(model, forward)
    item = model.synthetic_item()
    for size in warm_up_sizes(max_batch):
        serving.predict(collate([item] * size, model.device), 1)


def _time_both(model: TorchModel, eager: Forward, compiled: Forward,
               max_batch: int) -> tuple[float, float]:
    """ms per item of a batch of `max_batch`, eager then compiled."""
    batch = collate([model.synthetic_item()] * max_batch, model.device)
    return _ms_per_item(model, eager, batch), _ms_per_item(model, compiled, batch)


def _ms_per_item(model: TorchModel, forward: Forward, batch: torch.Tensor) -> float:
    """`predict` with `forward` on `batch`, in ms per item (`best_seconds`)."""
    serving = _serving(model, forward)
    return 1000 * best_seconds(lambda: serving.predict(batch, 1)) / len(batch)


def _serving(model: TorchModel, forward: Forward) -> TorchModel:
    """`model` with `forward` (a shallow copy: the model itself may be serving meanwhile)."""
    serving = copy.copy(model)
    serving.forward = forward
    return serving


def _use_cache_dir(directory: str) -> Path:
    """Inductor's cache in `directory` if set, else in TORCHINDUCTOR_CACHE_DIR if set, else in
    `default_cache_dir()`; torch's own default (under /tmp) where the directory cannot be made.
    torch writes its default into TORCHINDUCTOR_CACHE_DIR when torchvision is imported, so
    that value counts as unset. Returns where the packages are kept, in that cache."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir as torch_default

    if not directory:
        if os.environ.get(CACHE_ENV, torch_default()) != torch_default():
            return Path(os.environ[CACHE_ENV]) / SUBDIR
        directory = default_cache_dir()
    try:
        (Path(directory) / SUBDIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("compile cache %s unusable (%s); torch's default is used", directory, exc)
        return Path(os.environ.get(CACHE_ENV) or torch_default()) / SUBDIR
    os.environ[CACHE_ENV] = directory
    return Path(directory) / SUBDIR
