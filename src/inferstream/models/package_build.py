"""The child process that builds a compiled forward pass (`models.packages.AotiCompiler`).

    python -m inferstream.models.package_build INPUTS PACKAGE THREADS

reads the module and an example batch `torch.save`d to INPUTS, compiles them into the
AOTInductor package PACKAGE with THREADS torch threads, and exits 0; anything else is a
failure, its reason the last line of stderr. It runs at a lower priority than the worker
(`BUILD_NICE`), so that a worker serving eager while it compiles keeps the cores it wants,
and it exits when its parent does (its stdin, a pipe the parent never writes, closes).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import torch

#: nice increment of the build: serving eager comes first, the build takes the rest
BUILD_NICE = 10


def export_and_package(module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """`torch.export` with a dynamic batch dimension, compiled with frozen weights into the
    package at `path`."""
    from torch._inductor import aoti_compile_and_package
    from torch.export import Dim, export

    with torch.no_grad():  # Inductor freezes the weights of inference graphs only
        program = export(module, (example,), dynamic_shapes=({0: Dim("batch", min=1)},))
        aoti_compile_and_package(program, package_path=str(path),
                                 inductor_configs={"freezing": True})


def _exit_with_parent() -> None:
    # the raw descriptor: a buffered stdin's lock, held by this thread, aborts the shutdown
    while os.read(0, 4096):
        pass
    os._exit(1)


def main(argv: list[str]) -> int:
    inputs, package, threads = argv
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    os.nice(BUILD_NICE)
    torch.set_num_threads(int(threads))
    module, example = torch.load(inputs, weights_only=False)  # written by our own parent
    export_and_package(module, example, Path(package))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
