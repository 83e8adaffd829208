"""The model repository: a user's own models, served beside the built-in ones.

    REPO/NAME/model.toml          the card (`card.ModelCard`)
    REPO/NAME/labels.txt          optional: one label per line, for classification
    REPO/NAME/VERSION/model.pt2   torch.export.save, or
    REPO/NAME/VERSION/model.pt    torch.jit.save, or
    REPO/NAME/VERSION/model.py    a Python handler (`loaders`), only with allow_python_models

`layout` reads the folders and `card` the cards, without torch; `loaders` loads a model file
(`archive` vets a `.pt2` first), `model.RepositoryModel` serves it, `check` holds the checks
of `inferstream models check` and of a worker's start. docs/model-repository.md is the user's
page.
"""

from __future__ import annotations

from inferstream.models.repository.card import ModelCard, read_card
from inferstream.models.repository.errors import RepositoryError
from inferstream.models.repository.layout import (
    ModelEntry,
    ModelVersion,
    Repository,
    open_repository,
)

__all__ = ["ModelCard", "ModelEntry", "ModelVersion", "Repository", "RepositoryError",
           "open_repository", "read_card"]
