"""Stacking preprocessed items into one batch tensor for `LoadedModel.predict`.

The worker's dynamic batching loop (max batch, max wait) lives in `streams`; this is the part
of it that knows about tensors and devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def collate(tensors: Sequence[torch.Tensor], device: torch.device | str = "cpu") -> torch.Tensor:
    """Stack same-shaped CPU tensors along a new batch dimension.

    For a CUDA `device` the batch lands in pinned memory so that `predict` can copy it to the
    GPU asynchronously; torch's caching host allocator keeps pinned blocks for reuse.
    """
    if not tensors:
        raise ValueError("cannot collate an empty batch")
    shape = tensors[0].shape
    for t in tensors:
        if t.shape != shape:
            raise ValueError(f"cannot collate shapes {tuple(shape)} and {tuple(t.shape)}")
    if torch.device(device).type != "cuda":
        return torch.stack(list(tensors))
    out = torch.empty((len(tensors), *shape), dtype=tensors[0].dtype, pin_memory=True)
    return torch.stack(list(tensors), out=out)
