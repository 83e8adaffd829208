"""Models of the repository tests, built once per session: a small CNN trained a few steps on
synthetic images (saved with torch.export and TorchScript), its body without the classifier
head (an embedding model), a tensor-input model with two named outputs; and `make_repository`,
which lays them out in a repository folder."""

from __future__ import annotations

import fcntl
import io
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

#: the CNN's classes: images that are mostly red, green or blue
COLOURS = ("red", "green", "blue")
SIZE = 32
#: the tensor model's item shape
FEATURES = 6


@dataclass(frozen=True)
class Saved:
    """A module in eval mode and its model files' bytes."""

    module: torch.nn.Module
    pt2: bytes
    pt: bytes = b""


@dataclass(frozen=True)
class Models:
    cnn: Saved
    embedder: Saved
    #: tensor input [FEATURES] -> {"logits": [3], "features": [4, 2]}
    tensor: Saved
    #: the CNN exported with its batch dimension fixed at 2
    static: Saved


class TwoHeads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(FEATURES, 8)
        self.head = torch.nn.Linear(8, len(COLOURS))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.relu(self.body(x))
        return {"logits": self.head(features), "features": features.reshape(-1, 4, 2)}


def colour_batch(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` noisy images, each mostly one colour, normalised as ImageNet's; their classes."""
    generator = torch.Generator().manual_seed(seed)
    classes = torch.randint(0, len(COLOURS), (count,), generator=generator)
    images = torch.rand(count, 3, SIZE, SIZE, generator=generator) * 0.3
    images[torch.arange(count), classes] += 0.7
    mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
    return (images - mean) / std, classes


def train_cnn() -> torch.nn.Sequential:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(8, len(COLOURS)))
    optimiser = torch.optim.SGD(module.parameters(), lr=0.5)
    for step in range(30):
        images, classes = colour_batch(32, step)
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(module(images), classes).backward()
        optimiser.step()
    return module.eval()


def export(module: torch.nn.Module, example: torch.Tensor, *, dynamic: bool = True) -> bytes:
    shapes = ({0: torch.export.Dim("batch")},) if dynamic else None
    out = io.BytesIO()
    torch.export.save(torch.export.export(module, (example,), dynamic_shapes=shapes), out)
    return out.getvalue()


def script(module: torch.nn.Module, example: torch.Tensor) -> bytes:
    out = io.BytesIO()
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.trace(module, example), out)
    return out.getvalue()


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    """Built once per run: the first pytest-xdist worker to ask builds them (about a second,
    torch.export mostly) and leaves them in the run's shared temporary folder, where another
    worker reads them."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build_models()
    shared = tmp_path_factory.getbasetemp().parent / "repository-models.pt"
    with open(f"{shared}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shared.exists():
            built: Models = torch.load(shared, weights_only=False)
            return built
        built = build_models()
        torch.save(built, shared)
        return built


def build_models() -> Models:
    cnn = train_cnn()
    images, _ = colour_batch(2, 100)
    embedder = torch.nn.Sequential(*list(cnn)[:-1]).eval()
    torch.manual_seed(1)
    heads = TwoHeads().eval()
    vectors = torch.rand(2, FEATURES)
    return Models(cnn=Saved(cnn, export(cnn, images), script(cnn, images)),
                  embedder=Saved(embedder, export(embedder, images)),
                  tensor=Saved(heads, export(heads, vectors)),
                  static=Saved(cnn, export(cnn, images, dynamic=False)))


MakeRepository = Callable[..., Path]


@pytest.fixture
def make_repository(tmp_path: Path) -> MakeRepository:
    """`make_repository(name, card, {"1/model.pt2": bytes, "labels.txt": "..."})`: the
    repository folder, with model `name` laid out (more calls add models)."""
    root = tmp_path / "repo"

    def make(name: str, card: str | None, files: dict[str, bytes | str]) -> Path:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        if card is not None:
            (folder / "model.toml").write_text(card, encoding="utf-8")
        write_files(folder, files)
        return root

    return make


def write_files(folder: Path, files: dict[str, bytes | str]) -> None:
    """Each file of `files` (a path relative to `folder`: its text or bytes) written there."""
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)


CNN_CARD = f"[input]\nsize = [{SIZE}, {SIZE}]\n"
COLOUR_LABELS = "\n".join(COLOURS) + "\n"
TENSOR_CARD = f"[input]\nkind = \"tensor\"\nshape = [{FEATURES}]\n"
#: the tensor model as an embedding model, its [output] table open
TENSOR_FEATURES_CARD = TENSOR_CARD + "[output]\nkind = \"embedding\"\n"
