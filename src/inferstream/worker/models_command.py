"""`inferstream models list|check`: what a model repository holds, and whether a worker could
serve each of its versions (the checks a worker runs at start, `models.repository.check`).

    $ inferstream models list --model-repository models/
    products  versions 1 (export), 2 (torchscript)  input image [224, 224]  output classification
    $ inferstream models check --model-repository models/
    models/products/2/model.pt: the model outputs 11 classes and its labels file holds 12 labels

`check` exits 1 where anything is wrong, `list` where a model cannot be read or served (a
folder named like a built-in model, or that no job can name, a bad version folder): `list`
prints those on stderr, in the lines `check` prints.
"""

from __future__ import annotations

import argparse
import sys

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.models.names import is_model_name
from inferstream.models.repository import ModelEntry, Repository, open_repository
from inferstream.models.repository.check import shadowing, unnameable


def models_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("list", "check"),
                        help="list: each model, its versions, input and output; check: load "
                        "and run every version on synthetic batches, one line per problem")
    parser.add_argument("--model-repository", metavar="DIR",
                        help="the repository, a folder or file:// URI (default: [worker] "
                        "model_repository, INFERSTREAM_MODEL_REPOSITORY)")
    parser.add_argument("--allow-python-models", action="store_true",
                        help="check Python handlers too (importing them runs their code; "
                        "default: [worker] allow_python_models)")
    parser.add_argument("--device", default="cpu",
                        help="where check runs the models: cpu, cuda, cuda:N or auto "
                        "(default: cpu)")


def models(args: argparse.Namespace, config: Config) -> int:
    location = args.model_repository or config.worker.model_repository
    if not location:
        raise ConfigError("which model repository? --model-repository DIR (or "
                          "INFERSTREAM_MODEL_REPOSITORY)")
    repository = open_repository(location)
    if args.action == "list":
        return _list(repository)
    from inferstream.models import DEFAULT_MAX_PIXELS
    from inferstream.models.registry import resolve_device
    from inferstream.models.repository.check import check_repository

    allow = args.allow_python_models or config.worker.allow_python_models
    problems = check_repository(repository, allow_python=allow,
                                device=resolve_device(args.device),
                                max_pixels=DEFAULT_MAX_PIXELS)
    for problem in problems:
        print(problem)
    if not problems:
        names = repository.names()
        print(f"OK: {len(names)} model{'s' if len(names) != 1 else ''} in {repository.root}")
    return 1 if problems else 0


def _list(repository: Repository) -> int:
    problems = shadowing(repository)
    for name in repository.names():
        if not is_model_name(name):
            problems.append(unnameable(repository, name))
            continue
        entry, unreadable = repository.read_model(name)
        if entry is not None:
            print(describe(entry))
        problems.extend(unreadable)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def describe(entry: ModelEntry) -> str:
    """One model in one line: its versions (and their formats), input and output."""
    versions = ", ".join(f"{v.number} ({v.format})" for v in entry.versions)
    given, wanted = entry.card.input, entry.card.output
    if given.kind == "image":
        shown = f"image {list(given.size)}" + (f", resize {given.resize}" if given.resize else "")
    else:
        shown = f"tensor {list(given.shape)} {given.dtype}"
    output = wanted.kind + (f" {list(wanted.tensor)}" if wanted.tensor else "")
    return f"{entry.name}  versions {versions}  input {shown}  output {output}"
