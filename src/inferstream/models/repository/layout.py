"""The repository's folders: `REPO/NAME/model.toml`, `REPO/NAME/VERSION/model.{pt2,pt,py}`,
labels files; torch-free.

`open_repository` takes a local folder or a `file://` URI. A model's folder holds its card, an
optional labels file and one folder per version, named by a whole number from 1 to
`MAX_VERSION` (a version travels in 32-bit record fields); a version folder holds exactly one
model file and may hold its own labels file, which wins over the model's.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inferstream.models.names import MAX_VERSION, VERSION_SYNTAX, is_version
from inferstream.models.repository.card import ModelCard, read_card
from inferstream.models.repository.errors import RepositoryError

CARD = "model.toml"
DEFAULT_LABELS = "labels.txt"
ModelFormat = Literal["export", "torchscript", "handler"]
#: the model file of a version, by format: torch.export.save, torch.jit.save, a handler
MODEL_FILES: dict[str, ModelFormat] = {"model.pt2": "export", "model.pt": "torchscript",
                                       "model.py": "handler"}


@dataclass(frozen=True)
class ModelVersion:
    """One version of a repository model: its folder, its model file, its labels file."""

    name: str
    number: int
    folder: Path
    file: Path
    #: a classifier's labels file (the version's own, else the model's), None where none
    labels: Path | None

    @property
    def format(self) -> ModelFormat:
        return MODEL_FILES[self.file.name]


@dataclass(frozen=True)
class ModelEntry:
    """A repository model: its card and its versions, oldest first."""

    name: str
    folder: Path
    card: ModelCard
    versions: tuple[ModelVersion, ...]

    def newest(self) -> ModelVersion:
        return self.versions[-1]


class Repository:
    """A model repository on the local file system; reads a model's folder when asked."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def names(self) -> list[str]:
        """The model folders' names, sorted (hidden folders left out)."""
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and not p.name.startswith("."))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def model(self, name: str) -> ModelEntry:
        """Model `name`: its card and versions; RepositoryError for the first thing wrong."""
        entry, problems = self.read_model(name)
        if problems or entry is None:
            raise problems[0]
        return entry

    def read_model(self, name: str) -> tuple[ModelEntry | None, list[RepositoryError]]:
        """Model `name` with the versions that can be read, and every problem of its folder:
        misnamed version folders by name, then the versions' own (`models check` and `list`
        print them all; `model` raises the first); no entry where the folder, its card or
        every version cannot be read."""
        folder = self.root / name
        if not folder.is_dir():
            return None, [RepositoryError(folder, "no such model folder")]
        try:
            card = read_card(folder / CARD)
        except RepositoryError as exc:
            return None, [exc]
        numbers, problems = _version_numbers(folder)
        if not numbers and not problems:
            problems.append(RepositoryError(
                folder, "no version folder (1, 2, ...) holding a model file"))
        model_labels = folder / (card.output.labels or DEFAULT_LABELS)
        versions = []
        for number in numbers:
            try:
                versions.append(_version(name, folder / str(number), number, card,
                                         model_labels))
            except RepositoryError as exc:
                problems.append(exc)
        return ModelEntry(name, folder, card, tuple(versions)) if versions else None, problems


def open_repository(location: str) -> Repository:
    """The repository at `location`, a folder or a `file://` URI; RepositoryError where it is
    not a folder."""
    path = Path(location)
    if "://" in location:
        parts = urllib.parse.urlsplit(location)
        if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
            raise RepositoryError(location, "a model repository is a local folder or a "
                                  "file:// URI")
        path = Path(urllib.request.url2pathname(parts.path))
    if not path.is_dir():
        raise RepositoryError(path, "no such folder (the model repository)")
    if (path / CARD).is_file():
        raise RepositoryError(path, f"holds a {CARD}: this looks like a model folder; give its "
                              f"parent, the repository ({path.resolve().parent})")
    return Repository(path)


def read_labels(path: Path) -> tuple[str, ...]:
    """One label per line, the class id being the line's index (UTF-8; a byte order mark
    skipped, not part of the first label); RepositoryError for an empty file or an empty line
    before the last label."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(path, f"cannot read: {exc}") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise RepositoryError(path, "no labels (one per line, class 0 first)")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise RepositoryError(path, f"line {number} is empty (one label per line)")
    return tuple(line.strip() for line in lines)


def _version_numbers(folder: Path) -> tuple[list[int], list[RepositoryError]]:
    """The numbers of the model's version folders, ascending, and a RepositoryError for each
    folder whose name is not one (`VERSION_SYNTAX`)."""
    numbers, problems = [], []
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if not child.name.isascii() or not child.name.isdigit() or \
                child.name != str(int(child.name)) or int(child.name) < 1:
            problems.append(RepositoryError(child, f"a version folder's name is "
                                            f"{VERSION_SYNTAX} (1, 2, ...)"))
        elif not is_version(int(child.name)):
            problems.append(RepositoryError(child, (
                f"version {child.name} is above {MAX_VERSION}, the highest a version can be "
                f"(versions are {VERSION_SYNTAX}): renumber the folder, e.g. the next of "
                "1, 2, ... or the time in seconds since the epoch")))
        else:
            numbers.append(int(child.name))
    return sorted(numbers), problems


def _version(name: str, folder: Path, number: int, card: ModelCard,
             model_labels: Path) -> ModelVersion:
    files = [folder / f for f in MODEL_FILES if (folder / f).exists()]
    if not files:
        raise RepositoryError(folder, f"no model file ({', '.join(MODEL_FILES)})")
    if len(files) > 1:
        raise RepositoryError(folder, f"two model files ({', '.join(f.name for f in files)}):"
                              " keep one")
    if card.output.kind != "classification":
        return ModelVersion(name, number, folder, files[0], None)
    own = folder / model_labels.name
    labels = own if own.is_file() else model_labels if model_labels.is_file() else None
    if labels is None and card.output.labels is not None:
        raise RepositoryError(model_labels, "missing file (output.labels of the card)")
    return ModelVersion(name, number, folder, files[0], labels)
