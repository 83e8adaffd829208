"""The 1,000 ImageNet-1k class names, in the index order every model here predicts."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

NUM_IMAGENET_CLASSES = 1000


@lru_cache(maxsize=1)
def imagenet_labels() -> tuple[str, ...]:
    """Class names indexed by class id (0 is "tench", 281 "tabby")."""
    text = resources.files("inferstream.models").joinpath("imagenet_classes.txt").read_text("utf-8")
    labels = tuple(line for line in text.splitlines() if line)
    if len(labels) != NUM_IMAGENET_CLASSES:
        raise RuntimeError(f"imagenet_classes.txt holds {len(labels)} names, not 1000")
    return labels
