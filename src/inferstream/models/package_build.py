"""The child process that builds a compiled forward pass (`models.packages.AotiCompiler`).

    python -m inferstream.models.package_build INPUTS PACKAGE THREADS NICE

reads the module and an example batch `torch.save`d to INPUTS, compiles them into the
AOTInductor package PACKAGE with THREADS torch threads at nice NICE, and exits 0; anything
else is a failure, its reason the last line of stderr. It exits when its parent does (its
stdin, a pipe the parent never writes, closes).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import torch


def export_and_package(module: torch.nn.Module, example: torch.Tensor, path: Path) -> None:
    """`module` exported (`exported`) and compiled with frozen weights into the package at
    `path`."""
    from torch._inductor import aoti_compile_and_package

    with torch.no_grad():  # Inductor freezes the weights of inference graphs only
        aoti_compile_and_package(exported(module, example), package_path=str(path),
                                 inductor_configs={"freezing": True})


def exported(module: torch.nn.Module, example: torch.Tensor) -> torch.export.ExportedProgram:
    """`torch.export` for batches of 1 to the example's rows (the worker's `max_batch`). The
    batch dimension is dynamic and bounded by that many rows, as a user's export with
    `Dim(max=N)` needs (re-exported without the bound it violates its own constraint); an
    example of 1 row exports a batch of 1 alone (a dynamic dimension cannot be traced from a
    size of 1, and a model that takes batches of 1 alone may fail on 2)."""
    from torch.export import Dim, export

    rows = int(example.shape[0])
    shapes = None if rows == 1 else ({0: Dim("batch", min=1, max=rows)},)
    with torch.no_grad():
        return export(module, (example,), dynamic_shapes=shapes)


def _exit_with_parent() -> None:
    # the raw descriptor: a buffered stdin's lock, held by this thread, aborts the shutdown
    while os.read(0, 4096):
        pass
    os._exit(1)


def main(argv: list[str]) -> int:
    inputs, package, threads, nice = argv
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    os.nice(int(nice))
    torch.set_num_threads(int(threads))
    module, example = torch.load(inputs, weights_only=False)  # written by our own parent
    export_and_package(module, example, Path(package))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
