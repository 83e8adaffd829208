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
- **Compiled**: `torch.compile` (Inductor, frozen weights), with the C++ wrapper on a CPU: the
  whole graph runs in one C++ call without the GIL, where eager PyTorch takes the GIL back
  between operators and waits for it behind the event loop and the decode threads (P1: next
  to one busy Python thread, googlenet's eager forward pass ran 4.2x slower, the compiled one
  1.9x, the share of the two cores that thread took). Inductor's default Python wrapper keeps
  the GIL between kernels (pytorch/pytorch#163061); on CUDA that costs only the launches, so
  CUDA keeps the default wrapper. The batch dimension is dynamic, and every size class
  (Inductor picks kernels by batch size) is compiled at load, so serving never stops to
  compile. The kernels are cached on disk (`compile_cache_dir`); on a CPU the graphs are not
  (Inductor cannot pickle the oneDNN-packed weights), so a CPU worker traces and freezes again
  at every start. `auto` then times one batch compiled against eager and keeps the faster; a
  model that does not compile (no C++ compiler, an operator Inductor lacks) runs eager, and
  the line says why.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from inferstream.models.base import LoadedModel, TorchModel
from inferstream.models.collate import collate
from inferstream.models.device_decode import DeviceDecoder, choose_decoding
from inferstream.models.preprocess import ImagePreprocessor
from inferstream.models.timing import best_seconds

log = logging.getLogger(__name__)

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: compiled is kept under `auto` unless it measured this much slower than eager: a tie goes to
#: compiled, which leaves the GIL to the decode threads and the event loop
COMPILED_TOLERANCE = 1.05
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

#: Compiles a module for a device type; the seam tests use to make compiling fail.
Compiler = Callable[[torch.nn.Module, str], Callable[[torch.Tensor], torch.Tensor]]


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

    def describe(self) -> str:
        if not self.precision:  # nothing was prepared
            return f"forward of {self.model}: {self.why}"
        layout = "channels-last" if self.channels_last else "contiguous"
        head = "compiled" if self.compiled else "eager"
        return f"forward of {self.model}: {head} ({self.why}), {self.precision}, {layout}"


def default_cache_dir() -> str:
    """Where compiled graphs are kept: `$XDG_CACHE_HOME/inferstream/torch-compile`."""
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
                    cache_dir: str = "", compiler: Compiler | None = None) -> ForwardReport:
    """Set `model`'s precision, memory format and forward (compiled or eager); blocks for the
    compile (seconds to minutes the first time). `torch_threads` > 0 is set on the calling
    thread first: Inductor's CPU kernels keep the thread count they were compiled with."""
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
    _use_cache_dir(cache_dir)
    report = partial(ForwardReport, model.name, chosen, channels_last)
    return _compile(model, compile_mode, max_batch, compiler or compile_module, report)


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


def compile_module(module: torch.nn.Module,
                   device_type: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """`torch.compile` with frozen weights; on a CPU, with the C++ wrapper that runs the graph
    without the GIL. Compiling happens at the first call of each size class."""
    from torch._inductor import config as inductor_config

    options: dict[str, str | int | bool | Callable[..., object]] = {}
    if device_type == "cpu":
        options["cpp_wrapper"] = True
    compiled = torch.compile(module, options=options)

    def frozen(inputs: torch.Tensor) -> torch.Tensor:
        # Freezing must be on while dynamo traces, not only in Inductor (where the options
        # of torch.compile apply): else the parameters stay graph inputs and nothing is
        # frozen (pytorch/pytorch#126093), and the C++ wrapper takes the GIL back to free
        # each of them. Patched per call, so that a recompile freezes too.
        with inductor_config.patch(freezing=True):
            outputs: torch.Tensor = compiled(inputs)
        return outputs

    return frozen


def warm_up_sizes(max_batch: int) -> list[int]:
    """Batch sizes that compile every size class a batch of 1..max_batch falls in: the
    largest first (it marks the batch dimension dynamic), then halving down to 1."""
    sizes, size = [], max_batch
    while size > 1:
        sizes.append(size)
        size //= 2
    return [*sizes, 1]


def _compile(model: TorchModel, mode: str, max_batch: int, compiler: Compiler,
             report: Callable[..., ForwardReport]) -> ForwardReport:
    """Compile, warm up and (`auto`) time against eager; `report` completes the model's
    ForwardReport from `compiled` and `why` on."""
    log.info("compiling the forward pass of %s for %s, batch sizes %s (the first time can take "
             "minutes; cached in %s)", model.name, model.device,
             ", ".join(map(str, warm_up_sizes(max_batch))), os.environ.get(CACHE_ENV, "-"))
    eager = model.forward
    started = time.perf_counter()
    try:
        compiled = compiler(model.module, model.device.type)
        _warm_up(model, compiled, max_batch)
    except Exception as exc:  # any failure to compile leaves the model eager
        model.forward = eager
        first_line = (str(exc).strip().splitlines() or [""])[0][:160]
        return report(False, f"does not compile: {type(exc).__name__}: {first_line}")
    compile_s = time.perf_counter() - started
    how = f"{compile_s:.1f} s to compile"
    if mode == "on":
        model.forward = compiled
        return report(True, f"compile = on; {how}", compile_s)
    batch = collate([model.synthetic_item()] * max_batch, model.device)
    eager_ms = _ms_per_item(model, eager, batch)
    compiled_ms = _ms_per_item(model, compiled, batch)
    figures = f"{compiled_ms:.1f} ms/item against {eager_ms:.1f} eager"
    if compiled_ms > eager_ms * COMPILED_TOLERANCE:
        model.forward = eager
        return report(False, f"compiled ran slower: {figures}; {how}", compile_s, eager_ms,
                      compiled_ms)
    model.forward = compiled
    return report(True, f"{figures}; {how}", compile_s, eager_ms, compiled_ms)


def _warm_up(model: TorchModel, compiled: Callable[[torch.Tensor], torch.Tensor],
             max_batch: int) -> None:
    """Compile every size class through `predict`, the way batches will come: dynamo guards
    on how an input was made (an inference tensor or not), so a warm-up that made its inputs
    otherwise would leave a recompile for the first real batch. The first call marks the
    batch dimension dynamic; `model.forward` is `compiled` afterwards."""
    from torch._dynamo import maybe_mark_dynamic  # public in torch.compile's dynamic shapes

    def first_call(inputs: torch.Tensor) -> torch.Tensor:
        maybe_mark_dynamic(inputs, 0)
        return compiled(inputs)

    item = model.synthetic_item()
    for position, size in enumerate(warm_up_sizes(max_batch)):
        model.forward = first_call if position == 0 else compiled
        model.predict(collate([item] * size, model.device), 1)


def _ms_per_item(model: TorchModel, forward: Callable[[torch.Tensor], torch.Tensor],
                 batch: torch.Tensor) -> float:
    """`model.predict` on `batch` with `forward`, in ms per item (`best_seconds`)."""
    model.forward = forward
    return 1000 * best_seconds(lambda: model.predict(batch, 1)) / len(batch)


def _use_cache_dir(directory: str) -> None:
    """Inductor's cache in `directory` if set, else in TORCHINDUCTOR_CACHE_DIR if set, else in
    `default_cache_dir()`; torch's own default (under /tmp) where the directory cannot be made.
    torch writes its default into TORCHINDUCTOR_CACHE_DIR when torchvision is imported, so
    that value counts as unset."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir as torch_default

    if not directory:
        if os.environ.get(CACHE_ENV, torch_default()) != torch_default():
            return
        directory = default_cache_dir()
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("compile cache %s unusable (%s); torch's default is used", directory, exc)
        return
    os.environ[CACHE_ENV] = directory
