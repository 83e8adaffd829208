"""The registry's names, without torch: what the controller and the client need to check a
model name (the worker's `registry` builds the models behind them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstream.models.errors import UnknownModelError
from inferstream.schemas.records import SIM_PREFIX

TORCHVISION_MODELS = ("alexnet", "googlenet", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
LITE0 = "efficientnet_lite0"
SIM_SYNTAX = "sim:ms=N[,jitter=F]"


@dataclass(frozen=True)
class SimParams:
    """Per-item time `ms` in milliseconds and its uniform relative `jitter` (0.1 = ±10%)."""

    ms: float
    jitter: float = 0.0


def known_models() -> tuple[str, ...]:
    """Every fixed name in the registry (plus any `sim:ms=N[,jitter=F]`)."""
    return (*TORCHVISION_MODELS, LITE0)


def parse_sim_name(name: str) -> SimParams:
    """Parse `sim:ms=N[,jitter=F]`; ValueError says what is wrong."""
    if not name.startswith(SIM_PREFIX):
        raise ValueError(f"not a simulated model name: {name!r}")
    fields: dict[str, float] = {}
    for part in name[len(SIM_PREFIX) :].split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("ms", "jitter"):
            raise ValueError(f"expected ms=N or jitter=F, got {part!r}")
        fields[key.strip()] = float(value)
    if "ms" not in fields:
        raise ValueError("ms=N is required")
    params = SimParams(**fields)
    if not (0 <= params.ms < math.inf and 0 <= params.jitter <= 1):
        raise ValueError("need ms >= 0 and 0 <= jitter <= 1")
    return params


def check_model_name(name: str) -> None:
    """UnknownModelError, listing the names that exist, unless `name` is in the registry."""
    if name.startswith(SIM_PREFIX):
        try:
            parse_sim_name(name)
        except ValueError as exc:
            raise UnknownModelError(name, known_models(), detail=str(exc)) from None
    elif name not in known_models():
        raise UnknownModelError(name, known_models())
