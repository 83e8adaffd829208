"""Issue 27's acceptance for a user's own models on a real broker, through the commands a user
runs (`worker --model-repository DIR --model NAME`, `submit`, `results`):

- a small CNN trained in the test, saved with torch.export (version 1) and TorchScript
  (version 2) in one repository, labels a job's images as the module itself does on the same
  preprocessed tensors (top-1 exact, scores within 1e-4), each job on the version it names, in
  its output lines and in `results --format npz`;
- efficientnet_lite0 with its real weights and no classifier head, saved as an embedding model
  with the built-in's preprocessing on its card, answers the vectors of the module called
  directly on the built-in's preprocessed photos (`results --format npz`, cosine > 0.9999).

The workers run eager (the integration tests' default): the compiled forward path of a
repository model is unit-tested."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data as photos

from inferstream.models import DEFAULT_MAX_PIXELS, TorchModel, load_model
from inferstream.models.repository import read_card
from inferstream.models.repository.inputs import input_preprocessor
from tests.integration.conftest import Processes
from tests.unit.models.repository.conftest import (
    COLOUR_LABELS,
    COLOURS,
    SIZE,
    colour_batch,
    export,
    script,
    train_cnn,
    write_files,
)
from tests.unit.support.photos import encode

pytestmark = pytest.mark.integration

CNN_CARD = f"[input]\nsize = [{SIZE}, {SIZE}]\nresize = 40\n"
#: efficientnet_lite0's own preprocessing (models/registry.py LITE0_PREPROCESSING) as a card
LITE0_CARD = (f"[input]\nsize = [224, 224]\nresize = 256\ninterpolation = \"bicubic\"\n"
              f"mean = [{127 / 255!r}, {127 / 255!r}, {127 / 255!r}]\n"
              f"std = [{128 / 255!r}, {128 / 255!r}, {128 / 255!r}]\n"
              "[output]\nkind = \"embedding\"\n")


def coloured_images(folder: Path) -> list[Path]:
    """Mostly red, green or blue JPEGs of different sizes, and two photos (a PNG)."""
    folder.mkdir()
    rng = np.random.default_rng(7)
    paths = []
    for i, colour in enumerate((0, 1, 2, 2, 1, 0, 1, 2)):
        pixels = rng.integers(0, 80, (40 + 3 * i, 48 + 5 * i, 3), dtype=np.uint8)
        pixels[..., colour] += 170
        paths.append(folder / f"c{i}.jpg")
        paths[-1].write_bytes(encode(pixels))
    paths.append(folder / "chelsea.png")
    paths[-1].write_bytes(encode(photos.chelsea(), "PNG"))
    paths.append(folder / "coffee.jpg")
    paths[-1].write_bytes(encode(photos.coffee()))
    return paths


def submit(procs: Processes, model: str, paths: list[Path], *args: str) -> str:
    """The job id of `submit --model MODEL --input PATHS`, once it is done."""
    done = procs.run("submit", "--model", model, "--input", *map(str, paths), "--chunk-size",
                     "3", "--wait", "--timeout", "150", *args, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "completed: " in done.stderr and ", 0 errors" in done.stderr, done.stderr
    return done.stdout.splitlines()[0]


def output_lines(procs: Processes, job_id: str) -> dict[str, dict[str, object]]:
    """The job's output lines by item, one per item."""
    done = procs.run("results", job_id)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    by_item = {str(line["item"]): line for line in lines}
    assert len(by_item) == len(lines)
    return by_item


@pytest.mark.timeout(240)
def test_a_trained_cnn_labels_a_job_as_its_module_does_in_either_format(
        procs: Processes, tmp_path: Path) -> None:
    cnn = train_cnn()
    example, _ = colour_batch(2, 100)
    repo = tmp_path / "repo"
    write_files(repo, {
        "colours/model.toml": CNN_CARD, "colours/labels.txt": COLOUR_LABELS,
        "colours/1/model.pt2": export(cnn, example), "colours/2/model.pt": script(cnn, example)})
    paths = coloured_images(tmp_path / "images")
    procs.controller()
    procs.worker("colours", "--model-repository", str(repo), name="worker-a")

    preprocess = input_preprocessor(read_card(repo / "colours" / "model.toml").input,
                                     DEFAULT_MAX_PIXELS)
    with torch.no_grad():
        direct = torch.softmax(cnn(torch.stack([preprocess(p.read_bytes()) for p in paths])), 1)
    for version in ("1", "2"):  # torch.export, TorchScript
        job_id = submit(procs, f"colours:{version}", paths, "--top-k", "3")
        lines = output_lines(procs, job_id)
        top1 = []
        for path, scores in zip(paths, direct, strict=True):
            line = lines[str(path)]
            assert (line["status"], line["model"], line["model_version"]) == (
                "ok", "colours", version)
            top_k = line["top_k"]
            assert isinstance(top_k, list)
            assert top_k[0]["class_id"] == int(scores.argmax())
            assert [p["label"] for p in top_k] == [COLOURS[p["class_id"]] for p in top_k]
            assert [p["score"] for p in top_k] == pytest.approx(
                [float(scores[p["class_id"]]) for p in top_k], abs=1e-4)
            top1.append(top_k[0]["label"])
        # Trained a few steps on synthetic images: the coloured ones are told apart.
        assert top1[:8] == [COLOURS[c] for c in (0, 1, 2, 2, 1, 0, 1, 2)]
    out = tmp_path / "labels.npz"  # the last job's, as arrays
    done = procs.run("results", job_id, "--format", "npz", "--output", str(out))
    assert done.returncode == 0, done.stderr
    data = np.load(out)
    assert data["class_id"][:, 0].tolist() == direct.argmax(dim=1).tolist()
    assert data["score"] == pytest.approx(
        np.take_along_axis(direct.numpy(), data["class_id"], axis=1), abs=1e-4)


def lite0_photos(folder: Path) -> list[Path]:
    folder.mkdir()
    paths = []
    for name in ("chelsea", "coffee", "rocket", "astronaut", "camera"):
        paths.append(folder / f"{name}.jpg")
        paths[-1].write_bytes(encode(getattr(photos, name)()))
    return paths


@pytest.mark.timeout(240)
def test_efficientnet_lite0_without_its_head_answers_the_modules_vectors(
        procs: Processes, tmp_path: Path) -> None:
    builtin = load_model("efficientnet_lite0")  # its real weights and its preprocessing
    assert isinstance(builtin, TorchModel)
    body = builtin.module
    body.fc = torch.nn.Identity()
    repo = tmp_path / "repo"
    write_files(repo, {
        "search/model.toml": LITE0_CARD,
        "search/1/model.pt2": export(body, torch.rand(2, 3, 224, 224))})
    paths = lite0_photos(tmp_path / "photos")
    procs.controller()
    procs.worker("search", "--model-repository", f"file://{repo}", name="worker-a")
    job_id = submit(procs, "search", paths)

    out = tmp_path / "vectors.npz"
    done = procs.run("results", job_id, "--format", "npz", "--output", str(out))
    assert done.returncode == 0, done.stderr
    data = np.load(out)
    assert data["item"].tolist() == [str(p) for p in paths]
    assert data["ok"].all() and set(data["model_version"]) == {"1"}
    assert data["embedding"].shape == (len(paths), 1280)
    with torch.no_grad():
        direct = body(torch.stack([builtin.preprocess(p.read_bytes()) for p in paths]))
    got = torch.from_numpy(data["embedding"])
    cosine = torch.nn.functional.cosine_similarity(got, direct, dim=1)
    assert cosine.min() > 0.9999, cosine
    # Not normalised (the card's default): each vector is the module's own, length and all.
    assert got.norm(dim=1) == pytest.approx(direct.norm(dim=1), rel=1e-3)
