"""The registry's names, without torch: what the controller and the client need to check a
model name (the worker's `registry` builds the models behind them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferstream.models.errors import UnknownModelError
from inferstream.schemas.records import SIM_PREFIX, SIM_SYNTAX

__all__ = ["LITE0", "SIM_SYNTAX", "TORCHVISION_MODELS", "SimParams", "check_model_name",
           "known_models", "parse_sim_name"]

TORCHVISION_MODELS = ("alexnet", "googlenet", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
LITE0 = "efficientnet_lite0"
_SIM_KEYS = ("ms", "jitter", "slow_after", "slow_factor")


@dataclass(frozen=True)
class SimParams:
    """Per-item time `ms` in milliseconds and its uniform relative `jitter` (0.1 = ±10%).

    With `slow_after`, each item after the first `slow_after` a model has processed takes
    `slow_factor` x `ms`: a worker that slows down in the middle of a job (benchmarks).
    """

    ms: float
    jitter: float = 0.0
    slow_after: int | None = None
    slow_factor: float = 1.0


def known_models() -> tuple[str, ...]:
    """Every fixed name in the registry (plus any `SIM_SYNTAX` name)."""
    return (*TORCHVISION_MODELS, LITE0)


def parse_sim_name(name: str) -> SimParams:
    """Parse a `SIM_SYNTAX` name; ValueError says what is wrong."""
    if not name.startswith(SIM_PREFIX):
        raise ValueError(f"not a simulated model name: {name!r}")
    fields: dict[str, float] = {}
    for part in name[len(SIM_PREFIX) :].split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in _SIM_KEYS:
            raise ValueError(f"expected ms=N, jitter=F, slow_after=K or slow_factor=X, "
                             f"got {part!r}")
        fields[key.strip()] = float(value)
    if "ms" not in fields:
        raise ValueError("ms=N is required")
    if ("slow_after" in fields) != ("slow_factor" in fields):
        raise ValueError("slow_after=K and slow_factor=X go together")
    slow_after = fields.pop("slow_after", None)
    if slow_after is not None and not (0 <= slow_after < math.inf and slow_after.is_integer()):
        raise ValueError("need slow_after a whole number >= 0")
    params = SimParams(**fields, slow_after=None if slow_after is None else int(slow_after))
    _check_sim(params)
    return params


def _check_sim(params: SimParams) -> None:
    if not (0 <= params.ms < math.inf and 0 <= params.jitter <= 1):
        raise ValueError("need ms >= 0 and 0 <= jitter <= 1")
    if not 0 < params.slow_factor < math.inf:
        raise ValueError("need slow_factor > 0")


def check_model_name(name: str) -> None:
    """UnknownModelError, listing the names that exist, unless `name` is in the registry."""
    if name.startswith(SIM_PREFIX):
        try:
            parse_sim_name(name)
        except ValueError as exc:
            raise UnknownModelError(name, known_models(), detail=str(exc)) from None
    elif name not in known_models():
        raise UnknownModelError(name, known_models())
