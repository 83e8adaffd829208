"""`models list` flags what `models check` reports of a repository's folders (names no job can
give, built-in names, version folders past the records' range), and both say to give the
repository, not a model's folder."""

from __future__ import annotations

import pytest

from inferstream.cli import main
from tests.unit.models.repository.conftest import CNN_CARD, COLOUR_LABELS, MakeRepository, Models

GOOD = {"1/model.pt2": b"", "labels.txt": COLOUR_LABELS}


def test_models_list_flags_the_folders_check_reports(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A folder no job can name, one named like a built-in model and a version folder above
    2^31-1 were listed (or left out) without a word: `list` says what `check` says of them."""
    for name in ("colours", "modèle", "x" * 140, "resnet50"):
        root = make_repository(name, CNN_CARD, GOOD | {"1/model.pt2": models.cnn.pt2})
    make_repository("stamped", CNN_CARD, GOOD | {"202612071053/model.pt2": models.cnn.pt2})
    assert main(["models", "list", "--model-repository", str(root)]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"{name}  versions 1 (export)  input image [32, 32]  output classification"
        for name in ("colours", "resnet50", "stamped")]
    assert sorted(err.splitlines()) == sorted([
        f"{root}/resnet50: shadows the built-in model resnet50: give the folder another name",
        *(f"{root}/{name}: no job can name this model: a model's name is made of letters, "
          "digits, '.', '_' and '-', starting with a letter or a digit, at most 128 "
          "characters; rename the folder" for name in ("modèle", "x" * 140)),
        f"{root}/stamped/202612071053: version 202612071053 is above 2147483647, the highest "
        "a version can be (versions are a whole number from 1 to 2147483647): renumber the "
        "folder, e.g. the next of 1, 2, ... or the time in seconds since the epoch"])


@pytest.mark.parametrize("action", ["list", "check"])
def test_a_model_folder_given_as_the_repository_says_to_give_its_parent(
        action: str, models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repository("colours", CNN_CARD, {"1/model.pt2": models.cnn.pt2})
    assert main(["models", action, "--model-repository", str(root / "colours")]) == 2
    assert capsys.readouterr().err == (
        f"inferstream: error: {root}/colours: holds a model.toml: this looks like a model "
        f"folder; give its parent, the repository ({root})\n")


def test_models_list_shows_the_versions_it_can_read_and_every_bad_folder(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A model with a misnamed version folder beside good ones was left out of the list with
    its first problem only."""
    root = make_repository("colours", CNN_CARD, GOOD | {
        "1/model.pt2": models.cnn.pt2, "2/model.pt": models.cnn.pt, "01/model.pt2": b"x",
        "3/readme.txt": "no model here"})
    assert main(["models", "list", "--model-repository", str(root)]) == 1
    out, err = capsys.readouterr()
    assert out == ("colours  versions 1 (export), 2 (torchscript)  input image [32, 32]  "
                   "output classification\n")
    assert err.splitlines() == [
        f"{root}/colours/01: a version folder's name is a whole number from 1 to 2147483647 "
        "(1, 2, ...)",
        f"{root}/colours/3: no model file (model.pt2, model.pt, model.py)"]
