"""The registry's names, without torch: what the controller and the client need to check a
model name (the worker's `registry` builds the models behind them).

A model reference is `NAME` or `NAME:VERSION`: a built-in name, a `sim:` name, or the name of
a model in a worker's repository, which only the worker can tell; only a repository model has
versions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from inferstream.models.errors import UnknownModelError
from inferstream.schemas.records import SIM_PREFIX, SIM_SYNTAX, model_ref

__all__ = ["LITE0", "MAX_VERSION", "NAME_SYNTAX", "SIM_SYNTAX", "TORCHVISION_MODELS",
           "VERSION_SYNTAX", "SimParams", "check_builtin_name", "check_model_name",
           "has_versions", "is_model_name", "is_version", "known_models", "parse_sim_name",
           "version_ref"]

TORCHVISION_MODELS = ("alexnet", "googlenet", "resnet50", "mobilenet_v3_large", "efficientnet_b0")
LITE0 = "efficientnet_lite0"
#: What a repository model's name is made of (a built-in or `sim:` name aside).
NAME_SYNTAX = ("letters, digits, '.', '_' and '-', starting with a letter or a digit, at most "
               "128 characters")
#: The highest version of a repository model: versions travel as Avro ints (32 bits, signed)
#: in Job, Task, JobEvent, LedgerEntry and WorkerAnnouncement records. Seconds since the epoch
#: fit (until 2038); a yyyymmddHHMM timestamp does not.
MAX_VERSION = 2**31 - 1
#: What a version is: its folder's name, and VERSION in NAME:VERSION.
VERSION_SYNTAX = f"a whole number from 1 to {MAX_VERSION}"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VERSION = re.compile(r"[1-9][0-9]{0,9}")  # MAX_VERSION's 10 digits at most; is_version: its value
_SIM_KEYS = ("ms", "batch_ms", "as", "slower", "jitter", "slow_after", "slow_factor",
             "embedding", "decode_ms")

#: Published single-GPU inference throughput as (ms per batch, ms per item) fitted to
#: time(batch) = batch_ms + ms x size: one Tesla P40, INT8 with TensorRT, batch sizes 1 to 256
#: (Dell EMC HPC Innovation Lab, R. Xu, F. Han, N. Dandapanthu, "Deep Learning Inference on
#: P40 GPUs", 2017, figure 6: AlexNet 791 / 11,464 / 14,438 / 16,292 / 17,101 images/s and
#: GoogLeNet 594 / 5,417 / 6,059 / 6,410 / 6,630 at batch 1 / 32 / 64 / 128 / 256; the fit is
#: within 12 % at batch 1 and 3 % from batch 32 up). The source system's cluster was of
#: that era.
GPU_PROFILES: dict[str, tuple[float, float]] = {
    "alexnet": (1.072, 0.05396),
    "googlenet": (1.365, 0.14535),
}


@dataclass(frozen=True)
class SimParams:
    """A batch of n items takes (`batch_ms` + n x `ms`) x `slower` milliseconds, ± a uniform
    relative `jitter` (0.1 = ±10 %); `as=alexnet` or `as=googlenet` takes `batch_ms` and `ms`
    from one GPU's published throughput (`GPU_PROFILES`), and `slower` stretches time (a node
    S times slower, or a study run at 1/S of real speed so that 100 nodes fit one host).

    With `slow_after`, each item after the first `slow_after` a model has processed takes
    `slow_factor` x `ms`: a worker that slows down in the middle of a job (benchmarks).
    With `embedding` D > 0 the model answers each item with a vector of D floats, drawn from
    the item's bytes, instead of top-k predictions. With `decode_ms` each item's fetch sleeps
    that long on a decode thread, as a download or a JPEG decode would (x `slower`): a worker
    whose decoding, not its model, sets its speed.
    """

    ms: float
    jitter: float = 0.0
    slow_after: int | None = None
    slow_factor: float = 1.0
    batch_ms: float = 0.0
    slower: float = 1.0
    profile: str | None = None
    embedding: int = 0
    decode_ms: float = 0.0


def known_models() -> tuple[str, ...]:
    """Every fixed name in the registry (plus any `SIM_SYNTAX` name)."""
    return (*TORCHVISION_MODELS, LITE0)


def parse_sim_name(name: str) -> SimParams:
    """Parse a `SIM_SYNTAX` name; ValueError says what is wrong."""
    if not name.startswith(SIM_PREFIX):
        raise ValueError(f"not a simulated model name: {name!r}")
    fields: dict[str, float] = {}
    profile = None
    for part in name[len(SIM_PREFIX) :].split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or key not in _SIM_KEYS:
            raise ValueError(f"expected ms=N or as=PROFILE, then batch_ms=B, slower=S, "
                             f"jitter=F, slow_after=K,slow_factor=X, embedding=D or "
                             f"decode_ms=M; "
                             f"got {part!r}")
        if key == "as":
            if value not in GPU_PROFILES:
                raise ValueError(f"as={value!r}: profiles are {', '.join(GPU_PROFILES)}")
            profile = value
            continue
        try:
            fields[key] = float(value)
        except ValueError:
            raise ValueError(f"{key}={value!r} is not a number") from None
    if profile is not None:
        if "ms" in fields:
            raise ValueError(f"as={profile} sets ms: give one of them")
        batch_ms, fields["ms"] = GPU_PROFILES[profile]
        fields.setdefault("batch_ms", batch_ms)
    if "ms" not in fields:
        raise ValueError("ms=N (or as=alexnet|googlenet) is required")
    if ("slow_after" in fields) != ("slow_factor" in fields):
        raise ValueError("slow_after=K and slow_factor=X go together")
    slow_after, embedding = _whole(fields, "slow_after", 0), _whole(fields, "embedding", 1)
    params = SimParams(**fields, slow_after=slow_after, embedding=embedding or 0,
                       profile=profile)
    _check_sim(params)
    return params


def _whole(fields: dict[str, float], key: str, least: int) -> int | None:
    """`fields[key]`, taken out of `fields`, as a whole number >= `least`; None if not given."""
    value = fields.pop(key, None)
    if value is not None and not (least <= value < math.inf and value.is_integer()):
        raise ValueError(f"need {key} a whole number >= {least}")
    return None if value is None else int(value)


def _check_sim(params: SimParams) -> None:
    if not (0 <= params.ms < math.inf and 0 <= params.jitter <= 1):
        raise ValueError("need ms >= 0 and 0 <= jitter <= 1")
    if not (0 <= params.batch_ms < math.inf and 0 < params.slower < math.inf):
        raise ValueError("need batch_ms >= 0 and slower > 0")
    if not 0 < params.slow_factor < math.inf:
        raise ValueError("need slow_factor > 0")
    if not 0 <= params.decode_ms < math.inf:
        raise ValueError("need decode_ms >= 0")


def check_model_name(reference: str) -> tuple[str, int | None]:
    """The model name and version (None where none is given) of `reference`, `NAME` or
    `NAME:VERSION`; UnknownModelError unless NAME is a built-in name, a `SIM_SYNTAX` name or
    a repository model's (`NAME_SYNTAX`: whether a repository holds it only a worker can
    tell), and VERSION, given only for a repository model, `VERSION_SYNTAX`."""
    if reference.startswith(SIM_PREFIX):
        if re.search(r":[0-9]+$", reference[len(SIM_PREFIX):]):
            raise UnknownModelError(reference, known_models(),
                                    detail="a simulated model has no versions")
        check_builtin_name(reference)
        return reference, None
    name, sep, version = reference.partition(":")
    if not is_model_name(name):
        raise UnknownModelError(reference, known_models(), detail=(
            f"a repository model's name is made of {NAME_SYNTAX}, and NAME:VERSION names one "
            "of its versions"))
    if sep and not has_versions(name):
        raise UnknownModelError(reference, known_models(), detail=(
            f"{name} is a built-in model: only repository models have versions"))
    if sep and not (_VERSION.fullmatch(version) and is_version(int(version))):
        raise UnknownModelError(reference, known_models(), detail=(
            f"the version after {name}: is {VERSION_SYNTAX} (NAME:VERSION)"))
    return name, int(version) if sep else None


def is_version(number: int) -> bool:
    """Whether `number` is a version a repository model can have (`VERSION_SYNTAX`)."""
    return 1 <= number <= MAX_VERSION


def is_model_name(name: str) -> bool:
    """Whether `name` is a repository model's name that a job can give (NAME_SYNTAX)."""
    return _NAME.fullmatch(name) is not None


def has_versions(name: str) -> bool:
    """Whether the model named `name` (well-formed) is a repository model, which has versions:
    neither a built-in nor a simulated one."""
    return not name.startswith(SIM_PREFIX) and name not in known_models()


def version_ref(name: str, version: str | None) -> str:
    """What model `name` answers in `version` (a loaded model's or a sample's version
    string), as a `model_ref`: NAME:VERSION for a numbered version of a repository model,
    else the name (a built-in's version names its weights, not a version of the model)."""
    if has_versions(name) and version is not None and version.isdecimal():
        return model_ref(name, int(version))
    return name


def check_builtin_name(name: str) -> None:
    """UnknownModelError, listing the names that exist, unless `name` is in the registry
    (a built-in or a simulated model)."""
    if name.startswith(SIM_PREFIX):
        try:
            parse_sim_name(name)
        except ValueError as exc:
            raise UnknownModelError(name, known_models(), detail=str(exc)) from None
    elif name not in known_models():
        own = ("not a built-in model; a model of your own is served from a model repository: "
               "--model-repository DIR") if is_model_name(name) else None
        raise UnknownModelError(name, known_models(), detail=own)
