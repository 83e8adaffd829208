"""The checks of a model repository, the same for `inferstream models check` and a worker's
start: what can be read without torch (`check_names`: cards, folders, names), then each
version loaded and run on synthetic batches of 1, 2 and more items (`load_checked`). Every
problem is one line naming the file and the reason (`RepositoryError`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from inferstream.models.errors import ModelError, UnknownModelError
from inferstream.models.names import NAME_SYNTAX, check_builtin_name, is_model_name, known_models
from inferstream.models.repository.errors import HANDLER_REFUSED, RepositoryError
from inferstream.models.repository.layout import ModelEntry, ModelVersion, Repository
from inferstream.schemas.records import SIM_PREFIX

if TYPE_CHECKING:
    import torch

    from inferstream.models.repository.model import RepositoryModel


def check_names(repository: Repository, names: Iterable[str], *, allow_python: bool) -> None:
    """Before any model loads: no repository model shadows a built-in name, every name is a
    repository model whose newest version can be served here or a built-in model (the first
    problem raised: RepositoryError, UnknownModelError)."""
    for error in shadowing(repository):
        raise error
    for name in names:
        if name in repository:
            if not is_model_name(name):
                raise unnameable(repository, name)
            refused_handler(repository.model(name).newest(), allow_python=allow_python)
            continue
        model, _, version = name.partition(":")
        if version and model in repository:
            raise RepositoryError(repository.root / model, (
                f"a worker serves the newest versions of a model (model_versions, or the "
                f"card's [versions] latest), not one named: --model {model}; a job pins its "
                f"version (submit --model {name})"))
        try:
            check_builtin_name(name)
        except UnknownModelError as exc:
            raise UnknownModelError(name, [*known_models(), *repository.names()],
                                    detail=f"not in the repository {repository.root} either"
                                    ) from exc


def shadowing(repository: Repository) -> list[RepositoryError]:
    """A RepositoryError for each model folder named like a built-in model (or `sim:...`):
    a worker could not tell which one a task means."""
    return [RepositoryError(repository.root / name, f"shadows the built-in model {name}: "
                            "give the folder another name")
            for name in repository.names()
            if name in known_models() or name.startswith(SIM_PREFIX)]


def unnameable(repository: Repository, name: str) -> RepositoryError:
    """The RepositoryError of a model folder whose name no job can give (`--model` and a
    job's model are checked against NAME_SYNTAX)."""
    return RepositoryError(repository.root / name, (
        f"no job can name this model: a model's name is made of {NAME_SYNTAX}; "
        "rename the folder"))


def refused_handler(version: ModelVersion, *, allow_python: bool) -> None:
    """RepositoryError for a handler version where Python models are not allowed."""
    if version.format == "handler" and not allow_python:
        raise RepositoryError(version.file, HANDLER_REFUSED)


def load_checked(repository: Repository, name: str, device: torch.device | str, *,
                 allow_python: bool, max_pixels: int, number: int | None = None
                 ) -> RepositoryModel:
    """Version `number` (default: the newest) of model `name` loaded on `device` and run on
    synthetic batches (`RepositoryModel.check`); RepositoryError where anything fails."""
    entry = repository.model(name)
    version = entry.newest() if number is None else \
        next(v for v in entry.versions if v.number == number)
    return checked_version(entry, version, device, allow_python=allow_python,
                           max_pixels=max_pixels)


def checked_version(entry: ModelEntry, version: ModelVersion, device: torch.device | str, *,
                    allow_python: bool, max_pixels: int) -> RepositoryModel:
    """`version` of `entry` loaded on `device` and run on synthetic batches; RepositoryError
    where anything fails."""
    import torch

    from inferstream.models.repository.loaders import load_program
    from inferstream.models.repository.model import RepositoryModel

    device = torch.device(device)
    program = load_program(version, device, allow_python=allow_python)
    model = RepositoryModel(version, entry.card, program, device, max_pixels=max_pixels)
    model.check()
    return model


def check_repository(repository: Repository, *, allow_python: bool, device: str = "cpu",
                     max_pixels: int) -> list[str]:
    """Every problem of the repository, one line each: each model's card and folders, then
    each version loaded and run on synthetic batches."""
    problems = [str(error) for error in shadowing(repository)]
    for name in repository.names():
        if not is_model_name(name):
            problems.append(str(unnameable(repository, name)))
            continue
        entry, unreadable = repository.read_model(name)
        problems.extend(str(error) for error in unreadable)
        if entry is None:
            continue
        for version in entry.versions:
            try:
                checked_version(entry, version, device, allow_python=allow_python,
                                max_pixels=max_pixels)
            except ModelError as exc:
                problems.append(str(exc))
    return problems
