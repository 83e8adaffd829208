"""A repository model's card: `NAME/model.toml`, read with tomllib into one frozen `ModelCard`.

Every key is optional except `input.shape` of a tensor model; the defaults are the fields'
(docs/model-repository.md lists them). Unknown keys, wrong types and values out of range are
a `RepositoryError` naming the file and the key. torch-free: the worker checks cards before it
loads torch.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from inferstream.models.outputs import OUTPUT_KINDS, OutputKind
from inferstream.models.repository.errors import RepositoryError

InputKind = Literal["image", "tensor"]
INPUT_KINDS: tuple[InputKind, ...] = ("image", "tensor")
INTERPOLATIONS = ("bilinear", "bicubic")
#: numpy dtype names a tensor model may take (`.npy` items of exactly that dtype)
TENSOR_DTYPES = ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
                 "bool")
#: the [serving] choices, as the worker's settings of the same names (config/worker.py)
SERVING_CHOICES = {"compile": ("auto", "on", "off"),
                   "precision": ("auto", "fp32", "fp16", "bf16"),
                   "channels_last": ("on", "off")}
#: torchvision's ImageNet normalisation (`models.preprocess`, which needs torch)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

OutputChoice = str | int
#: [input] keys of an image model only
IMAGE_KEYS = ("size", "resize", "mean", "std", "interpolation", "exif_orientation")


@dataclass(frozen=True)
class InputSpec:
    """[input]: what an item is and how it becomes the model's input tensor."""

    kind: InputKind = "image"
    #: image: [height, width] of the model's input
    size: tuple[int, int] = (224, 224)
    #: image: the shorter side resized to this first, then the centre `size` cut out; None:
    #: the whole image resized to `size`
    resize: int | None = None
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bilinear"
    #: image: a photo turned as its EXIF orientation says; False: as stored, as torchvision's
    #: loader (`Image.open(f).convert("RGB")`) reads it
    exif_orientation: bool = False
    #: tensor: one item's shape (required), the batch dimension not counted
    shape: tuple[int, ...] = ()
    #: tensor: the items' numpy dtype
    dtype: str = "float32"


@dataclass(frozen=True)
class OutputSpec:
    """[output]: what the model's output means."""

    kind: OutputKind = "classification"
    #: classification: the labels file, looked for in the version's folder, then the model's;
    #: None: `labels.txt` where there is one, else class_0, class_1, ...
    labels: str | None = None
    #: classification: False where the model already outputs probabilities
    softmax: bool = True
    #: embedding: each vector scaled to length 1
    normalize: bool = False
    #: which of several outputs (a name of a dict's, an index of a tuple's): one for
    #: classification and embedding (required where there are several), any for tensor
    #: (empty: every output)
    tensor: tuple[OutputChoice, ...] = ()


@dataclass(frozen=True)
class ServingSpec:
    """[serving]: the worker's settings of the same names for this model (None: the worker's)."""

    max_batch: int | None = None
    compile: str | None = None
    precision: str | None = None
    channels_last: str | None = None


@dataclass(frozen=True)
class VersionsSpec:
    """[versions]: the model's version policy (docs/model-versions.md)."""

    #: the newest this many versions are served at once; None: the worker's model_versions
    latest: int | None = None


@dataclass(frozen=True)
class ModelCard:
    """What a repository model is: its input, its output and how the worker runs it."""

    input: InputSpec = InputSpec()
    output: OutputSpec = OutputSpec()
    serving: ServingSpec = ServingSpec()
    versions: VersionsSpec = VersionsSpec()


def read_card(path: Path) -> ModelCard:
    """The card at `path` (UTF-8; a byte order mark, as Windows editors write, skipped);
    RepositoryError for a missing or unreadable file or a bad key."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise RepositoryError(path, "missing file (every model has a card)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(path, f"cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RepositoryError(path, f"not valid TOML: {exc}") from None
    return _Reader(path).card(table)


class _Reader:
    """Reads one card's tables, each error naming the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, reason: str) -> RepositoryError:
        return RepositoryError(self.path, reason)

    def card(self, table: dict[str, Any]) -> ModelCard:
        names = ("input", "output", "serving", "versions")
        self.known(table, "", names)
        sections = {name: self.section(table, name) for name in names}
        self.known(sections["versions"], "versions.", ("latest",))
        card = ModelCard(self.input(sections["input"]), self.output(sections["output"]),
                         self.serving(sections["serving"]), VersionsSpec(
                             self.integer(sections["versions"], "versions.latest", None)))
        if card.input.kind == "image" and card.input.resize is not None and \
                card.input.resize < max(card.input.size):
            raise self.fail(f"input.resize {card.input.resize} is below input.size "
                            f"{list(card.input.size)}: the crop would leave the image")
        return card

    def section(self, table: dict[str, Any], name: str) -> dict[str, Any]:
        value = table.get(name, {})
        if not isinstance(value, dict):
            raise self.fail(f"[{name}] must be a table")
        return value

    def known(self, table: dict[str, Any], prefix: str, keys: tuple[str, ...]) -> None:
        unknown = sorted(set(table) - set(keys))
        if unknown:
            raise self.fail(f"unknown key {prefix}{unknown[0]} (known: {', '.join(keys)})")

    def kind_of(self, table: dict[str, Any], section: str, kind: str,
                keys: dict[str, tuple[str, ...]]) -> None:
        """Refuse a key of another kind than the card's (`keys`: each kind's own): it would
        be ignored without a word (a tensor card's `mean` normalises nothing)."""
        for other, own in keys.items():
            found = sorted(key for key in own if key in table)
            if other != kind and found:
                raise self.fail(f"{section}.{found[0]} is only for {section}.kind = "
                                f"\"{other}\", and this card's is \"{kind}\": remove it")

    def input(self, table: dict[str, Any]) -> InputSpec:
        self.known(table, "input.", ("kind", *IMAGE_KEYS, "shape", "dtype"))
        default = InputSpec()
        kind = cast(InputKind, self.choice(table, "input.kind", INPUT_KINDS, default.kind))
        self.kind_of(table, "input", kind, {"image": IMAGE_KEYS, "tensor": ("shape", "dtype")})
        shape = self.ints(table, "input.shape", None)
        if kind == "tensor" and shape is None:
            raise self.fail("input.shape is required for a tensor model, e.g. [3, 32, 32]")
        size = self.ints(table, "input.size", 2) or default.size
        return InputSpec(
            kind=kind, size=(size[0], size[1]),
            resize=self.integer(table, "input.resize", None),
            mean=self.triple(table, "input.mean", default.mean, positive=False),
            std=self.triple(table, "input.std", default.std, positive=True),
            interpolation=self.choice(table, "input.interpolation", INTERPOLATIONS,
                                      default.interpolation),
            exif_orientation=self.flag(table, "input.exif_orientation",
                                       default.exif_orientation),
            shape=shape or (), dtype=self.choice(table, "input.dtype", TENSOR_DTYPES,
                                                 default.dtype))

    def output(self, table: dict[str, Any]) -> OutputSpec:
        self.known(table, "output.", ("kind", "labels", "softmax", "normalize", "tensor"))
        kind = cast(OutputKind, self.choice(table, "output.kind", OUTPUT_KINDS,
                                            OutputSpec().kind))
        self.kind_of(table, "output", kind, {"classification": ("labels", "softmax"),
                                             "embedding": ("normalize",)})
        labels = table.get("labels")
        if labels is not None and (not isinstance(labels, str) or not labels.strip()):
            raise self.fail(f"output.labels must be a file name, got {labels!r}")
        tensor = self.outputs(table.get("tensor"))
        if kind != "tensor" and len(tensor) > 1:
            raise self.fail(f"output.tensor names one output of a {kind} model, got "
                            f"{list(tensor)}")
        return OutputSpec(kind=kind, labels=labels,
                          softmax=self.flag(table, "output.softmax", True),
                          normalize=self.flag(table, "output.normalize", False), tensor=tensor)

    def serving(self, table: dict[str, Any]) -> ServingSpec:
        self.known(table, "serving.", ("max_batch", *SERVING_CHOICES))
        choices = {name: self.choice(table, f"serving.{name}", allowed, None)
                   for name, allowed in SERVING_CHOICES.items()}
        return ServingSpec(max_batch=self.integer(table, "serving.max_batch", None), **choices)

    # -- one value each ------------------------------------------------------------------
    def choice(self, table: dict[str, Any], key: str, allowed: tuple[str, ...],
               default: str | None) -> Any:
        value = table.get(key.split(".")[1], default)
        if value is not default and value not in allowed:
            raise self.fail(f"{key} {value!r} is not one of {', '.join(allowed)}")
        return value

    def flag(self, table: dict[str, Any], key: str, default: bool) -> bool:
        value = table.get(key.split(".")[1], default)
        if not isinstance(value, bool):
            raise self.fail(f"{key} must be true or false, got {value!r}")
        return value

    def integer(self, table: dict[str, Any], key: str, default: int | None) -> int | None:
        value: Any = table.get(key.split(".")[1])
        if value is None:
            return default
        if not _is_int(value) or value < 1:
            raise self.fail(f"{key} must be a positive integer, got {value!r}")
        return int(value)

    def ints(self, table: dict[str, Any], key: str, count: int | None) -> tuple[int, ...] | None:
        """A list of positive integers (`count` of them, where given), None where absent."""
        value = table.get(key.split(".")[1])
        if value is None:
            return None
        what = f"{count} positive integers" if count else "a list of positive integers"
        wrong_count = count is not None and isinstance(value, list) and len(value) != count
        if not isinstance(value, list) or not value or wrong_count or \
                not all(_is_int(v) and v >= 1 for v in value):
            raise self.fail(f"{key} must be {what}, got {value!r}")
        return tuple(value)

    def triple(self, table: dict[str, Any], key: str, default: tuple[float, float, float],
               *, positive: bool) -> tuple[float, float, float]:
        value = table.get(key.split(".")[1])
        if value is None:
            return default
        numbers = isinstance(value, list) and len(value) == 3 and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and (v > 0 or not positive) for v in value)
        if not numbers:
            what = "three numbers above 0" if positive else "three numbers"
            raise self.fail(f"{key} must be {what} (one per RGB channel), got {value!r}")
        return (float(value[0]), float(value[1]), float(value[2]))

    def outputs(self, value: Any) -> tuple[OutputChoice, ...]:
        """output.tensor: a name, an index or a list of them."""
        items = value if isinstance(value, list) else [] if value is None else [value]
        for item in items:
            if not (isinstance(item, str) and item) and not (_is_int(item) and item >= 0):
                raise self.fail("output.tensor must be an output's name, its index from 0 "
                                f"or a list of them, got {value!r}")
        return tuple(items)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
