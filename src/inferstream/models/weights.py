"""Finding and reading weights files: never downloaded, always loaded with weights_only."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path

import torch

from inferstream.models.errors import ModelError, WeightsNotFoundError

WEIGHTS_DIR_ENV = "INFERSTREAM_WEIGHTS_DIR"


def search_dirs(weights_dir: str | None = None) -> list[Path]:
    """Directories searched for a weights file, in order.

    `weights_dir`, then $INFERSTREAM_WEIGHTS_DIR, then torch's checkpoint cache (where
    torchvision itself would have saved a download).
    """
    dirs: list[Path] = []
    if weights_dir:
        dirs.append(Path(weights_dir))
    if env_dir := os.environ.get(WEIGHTS_DIR_ENV):
        dirs.append(Path(env_dir))
    dirs.append(Path(torch.hub.get_dir()) / "checkpoints")
    return dirs


def find_weights(
    model: str,
    filename: str,
    *,
    weights: str | None = None,
    weights_dir: str | None = None,
    fallbacks: Sequence[Path] = (),
) -> Path:
    """Path of the weights file for `model`; WeightsNotFoundError lists every place tried.

    An explicit `weights` file is the only place looked at when given. `fallbacks` are
    tried after the search directories (a file shipped in a Python package, say).
    """
    if weights is not None:
        candidates = [Path(weights)]
    else:
        candidates = [d / filename for d in search_dirs(weights_dir)] + list(fallbacks)
    for path in candidates:
        if path.is_file():
            return path
    raise WeightsNotFoundError(model, [str(p) for p in candidates])


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Read a state dict without executing pickled code (weights_only)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise ModelError(f"cannot read weights file {path}: {exc}") from exc
    if not isinstance(state, dict):
        raise ModelError(f"weights file {path} holds a {type(state).__name__}, not a state dict")
    return state
