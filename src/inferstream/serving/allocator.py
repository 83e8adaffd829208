"""A caching allocator for the worker, where the system has one (`[worker] allocator`).

glibc hands buffers over 32 MiB (a batch's activations) back to the kernel when they are freed
and faults them in again for the next batch: 640,000 minor faults per efficientnet_lite0 batch
of 32 on a CPU, and jemalloc that keeps its memory took that model's forward pass from 68 to 25
ms per image (BENCHMARKS.md P1). A library cannot be swapped in once the process runs, so the
worker re-executes itself once at start (same pid, same arguments, before it loads a model)
with the allocator in LD_PRELOAD, and for jemalloc `MALLOC_CONF` that keeps freed pages (unless
one is set). The price is a resident size that stays at its peak. Nothing requires one: without
it the worker runs on glibc and says so. The Dockerfile installs libjemalloc2 and preloads it
itself, which this sees and leaves alone.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from inferstream.errors import ConfigError

#: Where distributions put jemalloc and tcmalloc, in the order they are tried.
CANDIDATES = (
    "/usr/lib/*-linux-gnu/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2",
    "/usr/local/lib/libjemalloc.so.2", "/usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib64/libtcmalloc_minimal.so.4",
)
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
#: Set in the re-executed worker: what it preloaded (so that it does not do it again).
MARKER = "INFERSTREAM_PRELOADED_ALLOCATOR"


@dataclass(frozen=True)
class Choice:
    """The allocator the worker runs on: `library` (None: glibc), and the environment to
    re-execute with (None: run on as it is)."""

    library: str | None
    env: dict[str, str] | None
    why: str


def find_allocator(candidates: tuple[str, ...] = CANDIDATES) -> str | None:
    for pattern in candidates:
        for path in sorted(glob.glob(pattern)):
            if os.path.isfile(path):
                return path
    return None


def choose(setting: str, env: Mapping[str, str],
           candidates: tuple[str, ...] = CANDIDATES) -> Choice:
    """What `allocator = setting` ("auto", "system" or a library's path) means here, given
    the process environment `env` and where to look for one."""
    preloaded = env.get("LD_PRELOAD", "")
    if env.get(MARKER):
        return Choice(env[MARKER], None, "preloaded at start")
    if any(name in preloaded for name in ("jemalloc", "tcmalloc")):
        return Choice(preloaded, None, "already in LD_PRELOAD")
    if setting == "system":
        return Choice(None, None, "allocator = system")
    if setting == "auto":
        library = find_allocator(candidates)
        if library is None:
            return Choice(None, None, "no jemalloc or tcmalloc found (apt-get install "
                          "libjemalloc2 for a faster CPU forward pass)")
    elif os.path.isfile(setting):
        library = setting
    else:
        raise ConfigError(f"worker.allocator {setting!r} is not auto, system or a library file")
    new_env = {**env, MARKER: library,
               "LD_PRELOAD": f"{library}:{preloaded}" if preloaded else library}
    if "jemalloc" in os.path.basename(library):
        new_env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    return Choice(library, new_env, "preloading")


def reexec_with(choice: Choice) -> None:
    """Become the same command with the allocator preloaded (returns only without one)."""
    if choice.env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        # the same interpreter and arguments: no shell is wanted
        os.execve(sys.executable, sys.orig_argv, choice.env)  # noqa: S606
