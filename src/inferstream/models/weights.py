"""Finding and reading weights files: never downloaded, always loaded with weights_only."""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
        raise ModelError(f"cannot read weights file {path}: {_why(exc)}") from exc
    if not isinstance(state, dict):
        raise ModelError(f"weights file {path} holds a {type(state).__name__}, not a state dict")
    return state


def _why(exc: BaseException) -> str:
    """torch.load's reason in one line. A file that weights_only refuses gets what it met
    (`Unsupported operand 147`, `Unsupported global: GLOBAL pathlib.PosixPath ...`) and what a
    weights file is; torch's own text is many lines that say to load it with
    weights_only=False, which inferstream never does."""
    text = str(exc)
    if "WeightsUnpickler error:" in text:
        met = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0]
        met = " ".join(met.split()).split(". Please use")[0]  # the allowlisting advice
        return (f"not a state dict of tensors alone ({met}): save the weights with "
                "torch.save(module.state_dict(), FILE)")
    if isinstance(exc, EOFError):
        return "the file ends early (empty, or cut short)"
    return " ".join(text.split()) or type(exc).__name__


def load_into(module: torch.nn.Module, state: Mapping[str, Any], path: Path,
              model: str) -> None:
    """`module.load_state_dict(state, strict=True)`; a ModelError in one line where the
    file's tensors are not the model's (torch's error lists every key, hundreds of lines
    under a traceback)."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelError(f"weights file {path} does not fit model {model!r}: "
                         f"{_misfit(module, state)}: give the model's own weights") from exc


def _misfit(module: torch.nn.Module, state: Mapping[str, Any]) -> str:
    """How many of the model's tensors `state` lacks, has besides and has of another shape,
    the first three of each named."""
    own = module.state_dict()
    kinds = {
        "missing": [key for key in own if key not in state],
        "unexpected": [key for key in state if key not in own],
        "of another shape": [key for key in own if key in state and tuple(own[key].shape)
                             != tuple(getattr(state[key], "shape", ()))],
    }
    return "; ".join(f"{len(keys)} {kind} ({', '.join(keys[:3])}{', ...' * (len(keys) > 3)})"
                     for kind, keys in kinds.items() if keys)
