"""Compiled forward passes kept between starts: one AOTInductor package per key, on disk.

A package (`AotiCompiler`: torch.export, then Inductor with frozen weights) holds the compiled
graph with its prepacked weights, so that a restarted worker loads it in a second or two
instead of compiling again (`models.forward`); torch.compile's own caches cannot hold a CPU
graph with oneDNN-packed weights. It is kept as
`<compile cache dir>/forward-packages/<model>-<digest>/forward.pt2` beside `entry.json`, which
records its key and the figures `compile auto` chose by. The key (`PackageKey`) is everything
the package depends on: the model's weights and code, precision, memory format, device,
batch size, threads and torch; a change of any part is another entry, and each model keeps its
`KEEP_PER_MODEL` newest. Entries are built in a staging directory and renamed into place under
a lock per key (flock: the cache dir wants a local disk or NFSv4), so two workers starting at
once build a package once and never read half of one; an entry that cannot be read or run is
removed and built again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import torch

from inferstream.models.errors import ModelError

log = logging.getLogger(__name__)

#: Layout of an entry; a change makes every older entry a miss.
FORMAT = 1
KEEP_PER_MODEL = 3
PACKAGE = "forward.pt2"
ENTRY = "entry.json"
SUBDIR = "forward-packages"

Forward = Callable[[torch.Tensor], torch.Tensor]


class Compiler(Protocol):
    """Builds and loads compiled packages of a module; the seam tests replace."""

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        """Write `module` compiled for batches like `example`, of 1 to its rows, to `path`."""

    def load(self, path: Path, device: torch.device) -> Forward:
        """The forward pass of the package at `path`, on `device`."""


class AotiCompiler:
    """AOTInductor: `torch.export` with a bounded dynamic batch dimension, compiled with frozen
    weights into a `.pt2` package that loads without compiling. The build runs in a child
    process (`models.package_build`) at `nice`: torch.export keeps module-level state that
    is not for threads (pytorch#195099), tracing and Inductor hold the GIL for seconds that
    serving threads want, and the compiler's memory goes with the child."""

    def __init__(self, nice: int = 0) -> None:
        self.nice = nice

    def build(self, module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
        inputs = path.with_name(f"{path.name}.inputs")
        torch.save((module, example), inputs)
        try:
            _build_in_child(inputs, path, self.nice)
        finally:
            inputs.unlink(missing_ok=True)

    def load(self, path: Path, device: torch.device) -> Forward:
        from torch._inductor import aoti_load_package

        index = -1
        if device.type == "cuda":
            index = torch.cuda.current_device() if device.index is None else device.index
        forward: Forward = aoti_load_package(str(path), device_index=index)
        return forward


class BuildError(ModelError):
    """The child process that builds a package failed; the message is its last words."""


def _build_in_child(inputs: Path, path: Path, nice: int) -> None:
    """Run `models.package_build` on `inputs`, with this thread's torch threads and this
    process's import path; BuildError where it fails. Its stderr goes to a file beside the
    package: a thread blocked reading a pipe would abort this process's exit."""
    command = [sys.executable, "-m", "inferstream.models.package_build", str(inputs),
               str(path), str(torch.get_num_threads()), str(nice)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path)}
    errors = path.with_name(f"{path.name}.stderr")
    # our own interpreter and module, on paths this process made
    with errors.open("wb") as sink, subprocess.Popen(  # noqa: S603
            command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=sink,
            env=env) as child:
        code = child.wait()
    if code != 0:
        lines = [line for line in errors.read_text(errors="replace").splitlines()
                 if line.strip()] or [f"exited with {code}"]
        raise BuildError(lines[-1].strip())


@dataclass(frozen=True)
class PackageKey:
    """What a compiled forward pass depends on; `weights` and `code` are sha256 digests."""

    model: str
    weights: str
    code: str
    precision: str
    channels_last: bool
    device: str
    max_batch: int
    torch_threads: int
    torch: str
    format: int = FORMAT

    def entry_name(self) -> str:
        """`<model>-<16 hex digits of the whole key>`, a directory name."""
        fields = json.dumps(asdict(self), sort_keys=True).encode()
        safe = "".join(c if c.isalnum() or c in "._" else "_" for c in self.model)
        return f"{safe}-{hashlib.sha256(fields).hexdigest()[:16]}"


@dataclass(frozen=True)
class Timings:
    """What building a package measured: seconds to compile and, under `compile auto`, a
    batch's ms per item compiled and eager (None where not timed)."""

    compile_s: float
    eager_ms_per_item: float | None = None
    compiled_ms_per_item: float | None = None


@dataclass(frozen=True)
class CompiledForward:
    """A package's forward pass, the timings of its build, and the seconds it took to load
    from the cache (None: built by this process)."""

    forward: Forward
    timings: Timings
    load_s: float | None


def package_key(module: torch.nn.Module, name: str, device: torch.device, *, precision: str,
                channels_last: bool, max_batch: int) -> PackageKey:
    """The key of `module`, in the precision and memory format it is compiled in, on the
    thread that compiles it (whose torch thread count the CPU kernels are built for)."""
    return PackageKey(model=name, weights=weights_digest(module), code=code_digest(module),
                      precision=precision, channels_last=channels_last,
                      device=device_model(device), max_batch=max_batch,
                      torch_threads=torch.get_num_threads(), torch=torch.__version__)


def weights_digest(module: torch.nn.Module) -> str:
    """sha256 of the state dict's names, dtypes, shapes and bytes (alexnet's 244 MB: 0.2 s)."""
    digest = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
        digest.update(data.numpy().data)
    return digest.hexdigest()


def code_digest(module: torch.nn.Module) -> str:
    """sha256 of the source files of the module's classes outside torch (torch's own are
    its version), and of the code of its graphs (a torch.export or TorchScript program's
    class is torch's): a model's code edited is another package, whatever its version says."""
    digest = hashlib.sha256()
    for part in module.modules():
        code = getattr(part, "code", None)
        if isinstance(code, str):
            digest.update(code.encode())
    classes = {type(m) for m in module.modules() if not type(m).__module__.startswith("torch.")}
    for qualified in sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in classes):
        digest.update(qualified.encode())
    files = {inspect.getsourcefile(cls) for cls in classes} - {None}
    for file in sorted(str(f) for f in files):
        digest.update(Path(file).read_bytes())
    return digest.hexdigest()


def device_model(device: torch.device) -> str:
    """The device type and what kernels are compiled for: the GPU's name and compute
    capability, or the CPU's vector extensions and model name."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"cuda {torch.cuda.get_device_name(device)} sm_{major}{minor}"
    return f"{device.type} {torch.backends.cpu.get_cpu_capability()} {_cpu_model_name()}"


def _cpu_model_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor()


class PackageCache:
    """The packages under `root`; `load` reads one (the seam where a test loads its own)."""

    def __init__(self, root: Path, load: Callable[[Path], Forward]):
        self.root = root
        self._load = load

    @contextlib.contextmanager
    def locked(self, key: PackageKey, *, wait: bool = True) -> Iterator[bool]:
        """Hold `key`'s lock: a second worker waits for the first's package, then reads it.
        Yields whether it is held: without `wait`, False where another holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / f"{key.entry_name()}.lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another worker is building the package
                yield False
                return
            yield True

    def read(self, key: PackageKey) -> CompiledForward | None:
        """The entry of `key` loaded, None where there is none; one that cannot be read (a
        partial copy, another key's, a package that does not load) is removed."""
        path = self.root / key.entry_name()
        if not (path / ENTRY).is_file():
            return None
        started = time.perf_counter()
        try:
            record = json.loads((path / ENTRY).read_text())
            if record["key"] != asdict(key):
                raise ValueError("its entry.json names another key")
            timings = Timings(**record["timings"])
            forward = self._load(path / PACKAGE)
        except Exception as exc:  # whatever is on disk, a bad entry is built again
            self.discard(key, exc)
            return None
        return CompiledForward(forward, timings, time.perf_counter() - started)

    def record(self, key: PackageKey, timings: Timings) -> None:
        """Replace the timings `key`'s entry records (atomic; nothing where it is gone)."""
        path = self.root / key.entry_name()
        record = {"key": asdict(key), "timings": asdict(timings)}
        with contextlib.suppress(OSError):
            fresh = path / f".{ENTRY}.{os.getpid()}"
            fresh.write_text(json.dumps(record, indent=1))
            fresh.replace(path / ENTRY)

    def discard(self, key: PackageKey, why: Exception) -> None:
        """Remove `key`'s entry, saying why (it is built again at the next load)."""
        path = self.root / key.entry_name()
        log.warning("compiled forward pass in %s unusable (%s: %s); compiling again", path,
                    type(why).__name__, str(why).strip()[:160])
        shutil.rmtree(path, ignore_errors=True)

    @contextlib.contextmanager
    def staging(self, key: PackageKey) -> Iterator[Path]:
        """A directory to build `key`'s package in (removed unless `publish`ed). Call under
        `locked`: leftovers of a build that died are removed first."""
        name = key.entry_name()
        for leftover in self.root.glob(f".{name}.*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=self.root))
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def publish(self, key: PackageKey, staging: Path, timings: Timings) -> Path:
        """Write the entry's record and rename the staging directory into place (atomic); the
        model's entries beyond the newest `KEEP_PER_MODEL` are removed."""
        record = {"key": asdict(key), "timings": asdict(timings)}
        (staging / ENTRY).write_text(json.dumps(record, indent=1))
        path = self.root / key.entry_name()
        try:
            staging.rename(path)
        except OSError:  # another writer's entry is there (a lock that does not hold)
            return path
        with contextlib.suppress(OSError):  # another worker pruning at the same time
            self._prune(path)
        return path

    def _prune(self, keep: Path) -> None:
        prefix = keep.name.rpartition("-")[0]
        entries = [p for p in self.root.iterdir()
                   if p.is_dir() and p != keep and p.name.rpartition("-")[0] == prefix]
        entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[KEEP_PER_MODEL - 1:]:
            shutil.rmtree(old, ignore_errors=True)
            (self.root / f"{old.name}.lock").unlink(missing_ok=True)
