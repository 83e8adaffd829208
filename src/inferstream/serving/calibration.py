"""The worker's measurement of its own speed on each model, so it is never scheduled blind.

After the models load and before the worker joins its group, and for a model or version
loaded later before it is sampled, one warm-up batch and then one timed batch of synthetic
items (the model's input shape) go through collate and predict, as a batch does in the
pipeline. A `sim:ms=N` model sleeps N ms per item, so it calibrates at about 1000 / N
items/s. A model calibrated while it served eager and compiled in the background
(`models.forward`) is calibrated again once the compiled forward pass is swapped in
(`outdated`): its items take another time from then on.
"""

from __future__ import annotations

import logging
import time
import weakref

from inferstream.models import LoadedModel
from inferstream.models.collate import collate
from inferstream.schemas.records import Calibration, now_ms

log = logging.getLogger(__name__)

#: the forward pass each model was last calibrated with
_calibrated: weakref.WeakKeyDictionary[LoadedModel, object] = weakref.WeakKeyDictionary()


def outdated(model: LoadedModel) -> bool:
    """Whether `model` runs another forward pass than the one it was last calibrated with
    (one compiled in the background, swapped in since)."""
    return model in _calibrated and _calibrated[model] is not getattr(model, "forward", None)


def calibrate(model: LoadedModel, items: int) -> Calibration | None:
    """Items/s of `model` on a batch of `items` synthetic items (after one warm-up batch);
    None where the model has no synthetic input or the batch fails. Blocks: run it on a
    thread."""
    _calibrated[model] = getattr(model, "forward", None)
    try:
        item = model.synthetic_item()
        # Warm-up at the same shape: lazy init, allocator caches, per-shape kernel choice.
        model.predict(collate([item] * items, model.device), 1)
        started = time.perf_counter()
        model.predict(collate([item] * items, model.device), 1)
        seconds = time.perf_counter() - started
    except Exception as exc:  # a model's own code (a Python handler) raises anything
        log.warning("calibration of %s failed, none reported: %s", model.name, exc)
        return None
    calibration = Calibration(model=model.name, version=model.version,
                              items_per_s=items / max(seconds, 1e-9), batch_size=items,
                              seconds=seconds, measured_at=now_ms())
    log.info("calibrated model=%s version=%s items_per_s=%.1f batch=%d seconds=%.3f",
             model.name, model.version, calibration["items_per_s"], items, seconds)
    return calibration
