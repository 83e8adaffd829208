"""A version's model file loaded into a module that runs a batch: `model.pt2`
(torch.export.save), `model.pt` (torch.jit.save) or `model.py` (a Python handler).

A handler is a Python file of the user's, imported only with `allow_python_models`. It
defines `load(version_dir: pathlib.Path, device: torch.device)`, which returns an object with
`predict(batch: Tensor) -> Tensor | tuple[Tensor, ...] | dict[str, Tensor]` (one row per item
of the batch, on `device`) and, optionally, `preprocess(data: bytes) -> Tensor` (one item's
bytes to its CPU input tensor, called on several threads at once; without it the card's
[input] applies). The handler places its own weights and picks its own precision. What its
preprocess raises on an item is that item's error (`HandlerPreprocess`), never the worker's.

A file written by another saver than its name says (a torch.save pickle, TorchScript as
`model.pt2`, torch.export as `model.pt`) is refused naming the saver (`archive.saved_by`):
torch's own error calls such a file corrupted.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from inferstream.models.errors import ItemError, error_line
from inferstream.models.repository.archive import PICKLED, saved_by, vet_export_archive
from inferstream.models.repository.errors import HANDLER_REFUSED, RepositoryError
from inferstream.models.repository.layout import ModelVersion

log = logging.getLogger(__name__)

#: Held while a torch.export file loads: torch.export.load keeps its state in a module global
#: and fails on a second thread meanwhile (pytorch#195099), as the members of one worker
#: process each load a new version at once.
_EXPORT_LOAD = threading.Lock()


@dataclass(frozen=True)
class Program:
    """What a model file loaded into: the module `predict` runs on a batch and, for a
    handler, its own preprocess (None: the card's [input])."""

    module: torch.nn.Module
    preprocess: Callable[[bytes], torch.Tensor] | None = None
    handler: bool = False
    #: the most items per batch the program takes (a torch.export batch Dim's max, which its
    #: module enforces); None: no bound
    max_batch: int | None = None


class ExportedModule(torch.nn.Module):
    """A torch.export program's module, in the mode it was exported in (it refuses eval()).

    It pickles as its file and its weights (`torch.save`, for the child process that compiles
    it: `models.package_build`), loaded again there: the program's module does not pickle
    itself (torch's export gives it lambdas as hooks)."""

    def __init__(self, program: torch.nn.Module, file: Path) -> None:
        super().__init__()
        self.program = program
        self.file = file

    def __reduce__(self) -> tuple[Any, ...]:
        tensors = [*self.program.named_parameters(), *self.program.named_buffers()]
        weights = {name: tensor.detach() for name, tensor in tensors}
        return (_exported_again, (self.file, weights, self.training))

    def train(self, mode: bool = True) -> ExportedModule:
        self.training = mode  # the program's own train() and eval() raise NotImplementedError
        return self

    def forward(self, batch: torch.Tensor) -> Any:
        return self.program(batch)


def _exported_again(file: Path, weights: dict[str, torch.Tensor],
                    training: bool) -> ExportedModule:
    """An ExportedModule unpickled: its file vetted and loaded again, with the weights it was
    pickled with (in the precision and memory format the worker gave them)."""
    vet_export_archive(file)
    module = constants_as_buffers(_read_export(file).module(check_guards=False))
    for name, tensor in weights.items():
        owner, _, leaf = name.rpartition(".")
        holder = module.get_submodule(owner)
        if isinstance(getattr(holder, leaf), torch.nn.Parameter):
            tensor = torch.nn.Parameter(tensor, requires_grad=False)
        setattr(holder, leaf, tensor)  # in place of the parameter or buffer of that name
    return ExportedModule(module, file).train(training)


class HandlerPreprocess:
    """A handler's `preprocess`, its failures made item errors: an ItemError it raises passes
    as it is, any other exception becomes `model error: ValueError: ...` (so that an item the
    handler's own code fails on does not read as the worker's internal error), and what is
    not a tensor is refused."""

    def __init__(self, preprocess: Callable[[bytes], Any]) -> None:
        self.preprocess = preprocess

    def __call__(self, data: bytes) -> torch.Tensor:
        try:
            item = self.preprocess(data)
        except ItemError:
            raise
        except Exception as exc:  # the handler's own code raises anything
            log.debug("the handler's preprocess failed on an item", exc_info=True)
            raise ItemError(f"model error: {error_line(exc)}") from exc
        if not isinstance(item, torch.Tensor):
            raise ItemError(f"model error: preprocess returned a {type(item).__name__}, not "
                            "a tensor")
        return item


class HandlerModule(torch.nn.Module):
    """A handler's `predict` as the module `RepositoryModel` runs."""

    def __init__(self, handler: Any) -> None:
        super().__init__()
        self.handler = handler

    def forward(self, batch: torch.Tensor) -> Any:
        return self.handler.predict(batch)


def load_program(version: ModelVersion, device: torch.device, *,
                 allow_python: bool) -> Program:
    """`version`'s model file loaded on `device`; RepositoryError naming the file and why it
    does not load (a handler without `allow_python`: refused before it is read)."""
    if version.format == "handler":
        if not allow_python:
            raise RepositoryError(version.file, HANDLER_REFUSED)
        return _load_handler(version, device)
    try:
        if version.format == "export":
            return _load_exported(version)
        _vet_torchscript(version.file)
        with warnings.catch_warnings():
            # TorchScript is deprecated upstream and still common: the format too.
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit")
            jit_load: Callable[..., torch.nn.Module] = torch.jit.load  # untyped upstream
            return Program(jit_load(str(version.file), map_location=device))
    except RepositoryError:
        raise
    except Exception as exc:  # torch raises anything for a file it cannot read
        raise RepositoryError(version.file, f"does not load: {error_line(exc)}") from None


def _vet_torchscript(path: Path) -> None:
    """RepositoryError where a `model.pt` is a torch.save pickle or a torch.export archive,
    which torch.jit.load would call a corrupted file (`constants.pkl` not found)."""
    saver = saved_by(path)
    if saver == "torch.save":
        raise RepositoryError(path, PICKLED)
    if saver == "torch.export.save":
        raise RepositoryError(path, "written by torch.export.save, not torch.jit.save "
                              "(TorchScript): rename it model.pt2")


def _load_exported(version: ModelVersion) -> Program:
    vet_export_archive(version.file)
    program = _read_export(version.file)
    inputs = program.graph_signature.user_inputs
    if len(inputs) != 1:
        raise RepositoryError(version.file, f"the program takes {len(inputs)} inputs; a "
                              "repository model takes one batch tensor")
    placeholder = next(n for n in program.graph.nodes if n.name == inputs[0])
    value = placeholder.meta.get("val")
    batch = value.shape[0] if isinstance(value, torch.Tensor) and value.dim() else None
    if isinstance(batch, int):
        # torch.export fixes a dimension of 1 however it is marked, and says it did: "You
        # marked batch as dynamic but your code specialized it to be a constant (1)".
        example = " and an example batch of 2 items or more (torch.export fixes a batch of 1)" \
            if batch == 1 else ""
        raise RepositoryError(version.file, f"its batch dimension is fixed at {batch}: export "
                              f"it with dynamic_shapes=({{0: torch.export.Dim('batch')}},)"
                              f"{example}")
    # check_guards=False: the guards would be code the file carries, exec'd (archive.py).
    module = constants_as_buffers(program.module(check_guards=False))
    return Program(ExportedModule(module, version.file),
                   max_batch=_largest_batch(program, batch))


def constants_as_buffers(module: torch.nn.Module) -> torch.nn.Module:
    """`module` (a torch.export program's) with its tensor constants registered as buffers
    (not persistent), so that `.to()` moves and converts them with the weights, as the worker
    does to the model's device and precision. A constant is a plain tensor attribute of the
    exported module or a tensor its forward made (`torch.tensor([...])`); its module keeps
    it as a plain attribute, which `.to()` leaves alone, and the model failed in half
    precision (`expected m1 and m2 to have the same dtype`) and on a GPU (`Expected all
    tensors to be on the same device`) after its check on the CPU had passed."""
    for owner in module.modules():
        constants = [(name, value) for name, value in vars(owner).items()
                     if isinstance(value, torch.Tensor)]
        for name, value in constants:
            delattr(owner, name)
            owner.register_buffer(name, value, persistent=False)
    return module


def _read_export(file: Path) -> torch.export.ExportedProgram:
    """`torch.export.load` of `file`, one thread at a time (`_EXPORT_LOAD`)."""
    read: Callable[[Path], torch.export.ExportedProgram] = torch.export.load  # untyped upstream
    with _EXPORT_LOAD:
        return read(file)


def _largest_batch(program: torch.export.ExportedProgram, batch: object) -> int | None:
    """The max of the program's batch Dim (`Dim("batch", max=4)`), None where it has none:
    its module raises on a larger batch."""
    if not isinstance(batch, torch.SymInt):
        return None
    bound = program.range_constraints.get(batch.node.expr)
    return int(bound.upper) if bound is not None and bound.upper.is_Integer else None


def _load_handler(version: ModelVersion, device: torch.device) -> Program:
    name = f"inferstream_handler_{version.name}_{version.number}"
    spec = importlib.util.spec_from_file_location(name, version.file)
    if spec is None or spec.loader is None:
        raise RepositoryError(version.file, "not importable as a Python module")
    try:
        source = importlib.util.module_from_spec(spec)
        sys.modules[name] = source  # as an import does: dataclasses and pickle look there
        spec.loader.exec_module(source)
        load = getattr(source, "load", None)
        if not callable(load):
            raise RepositoryError(version.file, "defines no load(version_dir, device)")
        handler = load(version.folder, device)
    except RepositoryError:
        raise
    except Exception as exc:  # the handler's own code failed
        raise RepositoryError(version.file, f"does not load: {error_line(exc)}") from None
    if not callable(getattr(handler, "predict", None)):
        raise RepositoryError(version.file, "load() returned an object without "
                              "predict(batch)")
    preprocess = getattr(handler, "preprocess", None)
    return Program(HandlerModule(handler),
                   HandlerPreprocess(preprocess) if callable(preprocess) else None,
                   handler=True)

