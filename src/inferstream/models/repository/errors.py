"""The one error of the model repository: a file and what is wrong with it, in one line."""

from __future__ import annotations

from pathlib import Path

from inferstream.models.errors import ModelError

HANDLER_REFUSED = ("a Python handler is code of the model's author, run inside the worker: "
                   "served only with --allow-python-models")


class RepositoryError(ModelError):
    """What is wrong with a repository's file (a card, a model file, a labels file, a version
    folder); its str is `<path>: <reason>`, the line `models check` prints and a worker
    refuses to start with."""

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")
