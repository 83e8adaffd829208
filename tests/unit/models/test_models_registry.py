"""The registry: names, weights search order and its error, loading from a file, collate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.models import get_model

from inferstream.models import (
    WEIGHTS_DIR_ENV,
    ModelError,
    TorchModel,
    UnknownModelError,
    WeightsNotFoundError,
    get_model_spec,
    known_models,
    load_model,
)
from inferstream.models.collate import collate
from inferstream.models.registry import torchvision_weights_filename
from inferstream.models.weights import find_weights

MOBILENET_FILE = "mobilenet_v3_large-8738ca79.pth"


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty weights_dir, $INFERSTREAM_WEIGHTS_DIR and torch cache directories."""
    made = {name: tmp_path / name for name in ("arg", "env", "torch")}
    for path in made.values():
        path.mkdir()
    monkeypatch.setenv(WEIGHTS_DIR_ENV, str(made["env"]))
    monkeypatch.setenv("TORCH_HOME", str(made["torch"]))
    (made["torch"] / "hub" / "checkpoints").mkdir(parents=True)
    return made


def test_unknown_model_lists_known_names() -> None:
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("vgg99")
    for name in known_models():
        assert name in str(info.value)
    assert "sim:ms=N" in str(info.value)
    assert "--model-repository DIR" in str(info.value)  # a name a model of one's own may have
    with pytest.raises(UnknownModelError) as info:
        get_model_spec("no such model")
    assert "--model-repository" not in str(info.value)  # no repository model is named so


@pytest.mark.parametrize("name", [
    "sim:", "sim:ms=-1", "sim:ms=5,jitter=2", "sim:speed=3", "sim:ms=5,slow_after=10",
    "sim:ms=5,slow_factor=4", "sim:ms=5,slow_after=1.5,slow_factor=4",
    "sim:ms=5,slow_after=-1,slow_factor=4", "sim:ms=5,slow_after=10,slow_factor=0",
    "sim:ms=5,decode_ms=-1", "sim:ms=5,decode_ms=inf"])
def test_malformed_sim_names_are_unknown(name: str) -> None:
    with pytest.raises(UnknownModelError):
        get_model_spec(name)


def test_torchvision_file_names_come_from_the_weights_enum() -> None:
    assert torchvision_weights_filename("resnet50") == "resnet50-0676ba61.pth"
    assert torchvision_weights_filename("mobilenet_v3_large") == MOBILENET_FILE


def test_weights_search_order(dirs: dict[str, Path]) -> None:
    for where in ("torch", "env", "arg"):
        folder = dirs[where] / "hub" / "checkpoints" if where == "torch" else dirs[where]
        (folder / MOBILENET_FILE).write_bytes(b"x")
        found = find_weights("m", MOBILENET_FILE, weights_dir=str(dirs["arg"]))
        assert found == folder / MOBILENET_FILE
    explicit = dirs["arg"] / "mine.pth"
    explicit.write_bytes(b"x")
    assert find_weights("m", MOBILENET_FILE, weights=str(explicit)) == explicit


def test_missing_weights_error_names_every_place(dirs: dict[str, Path]) -> None:
    with pytest.raises(WeightsNotFoundError) as info:
        load_model("resnet50", weights_dir=str(dirs["arg"]))
    message = str(info.value)
    for folder in (dirs["arg"], dirs["env"], dirs["torch"] / "hub" / "checkpoints"):
        assert str(folder / "resnet50-0676ba61.pth") in message
    assert "`inferstream worker --weights FILE`" in message
    assert "--random-weights" in message
    assert "\n" not in message  # one line, as the worker prints every mistake


def test_missing_explicit_weights_file(tmp_path: Path) -> None:
    with pytest.raises(WeightsNotFoundError, match=r"nothing\.pth"):
        load_model("mobilenet_v3_large", weights=str(tmp_path / "nothing.pth"))


def test_loads_weights_from_the_expected_file(dirs: dict[str, Path]) -> None:
    torch.manual_seed(7)
    state = get_model("mobilenet_v3_large", weights=None).state_dict()
    torch.save(state, dirs["env"] / MOBILENET_FILE)
    model = load_model("mobilenet_v3_large")
    assert isinstance(model, TorchModel)
    loaded = model.module.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    predictions = model.predict(torch.zeros(2, 3, 224, 224), top_k=3)
    assert [len(p) for p in predictions] == [3, 3]
    assert all(label == model.labels[c] for c, label, _ in predictions[0])


def test_googlenet_checkpoint_with_aux_heads_loads(dirs: dict[str, Path]) -> None:
    state = get_model("googlenet", weights=None, aux_logits=True, init_weights=False).state_dict()
    torch.save(state, dirs["arg"] / torchvision_weights_filename("googlenet"))
    model = load_model("googlenet", weights_dir=str(dirs["arg"]))
    (prediction,) = model.predict(torch.zeros(1, 3, 224, 224), top_k=1)
    assert len(prediction) == 1


def test_weights_file_with_pickled_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"payload": Path("/etc/passwd")}, path)  # any non-tensor class
    with pytest.raises(ModelError, match="cannot read weights file"):
        load_model("mobilenet_v3_large", weights=str(path))


@pytest.mark.parametrize("content", [b"not weights at all", b""])
def test_a_file_that_holds_no_weights_is_one_line(tmp_path: Path, content: bytes) -> None:
    """torch's refusal is seven lines that say to load the file with weights_only=False; the
    worker says what the file is not, in one line."""
    path = tmp_path / "photo.pth"
    path.write_bytes(content)
    with pytest.raises(ModelError) as info:
        load_model("mobilenet_v3_large", weights=str(path))
    message = str(info.value)
    assert message.startswith(f"cannot read weights file {path}: ")
    assert "\n" not in message and "weights_only` set to `False" not in message
    assert not message.endswith(": ")  # an empty file said nothing after the path


def test_pickled_code_is_named_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"payload": Path("/etc/passwd")}, path)
    with pytest.raises(ModelError) as info:
        load_model("mobilenet_v3_large", weights=str(path))
    assert "not a state dict of tensors alone (Unsupported global: GLOBAL pathlib." in str(
        info.value)
    assert "\n" not in str(info.value) and "\x1b" not in str(info.value)


@pytest.mark.parametrize("name", ["mobilenet_v3_large", "efficientnet_lite0"])
def test_weights_of_another_model_are_one_line_not_a_traceback(tmp_path: Path,
                                                               name: str) -> None:
    """torch's load_state_dict raised a RuntimeError listing every key, which the worker
    printed under a traceback."""
    path = tmp_path / "other.pth"
    torch.save({"a": torch.zeros(2)}, path)
    with pytest.raises(ModelError) as info:
        load_model(name, weights=str(path))
    message = str(info.value)
    assert message.startswith(f"weights file {path} does not fit model {name!r}: ")
    assert ", ...); 1 unexpected (a)" in message and "\n" not in message


def test_a_tensor_of_another_shape_is_named(tmp_path: Path) -> None:
    state = get_model("mobilenet_v3_large", weights=None).state_dict()
    state["classifier.3.bias"] = torch.zeros(10)
    path = tmp_path / "ten-classes.pth"
    torch.save(state, path)
    with pytest.raises(ModelError, match=r": 1 of another shape \(classifier\.3\.bias\): "):
        load_model("mobilenet_v3_large", weights=str(path))


def test_random_weights_need_no_file(dirs: dict[str, Path]) -> None:
    model = load_model("mobilenet_v3_large", random_weights=True)
    (prediction,) = model.predict(torch.zeros(1, 3, 224, 224), top_k=1000)
    assert len(prediction) == 1000
    assert sum(score for _, _, score in prediction) == pytest.approx(1.0, abs=1e-4)


def test_collate_stacks_and_checks_shapes() -> None:
    batch = collate([torch.ones(3, 4, 4), torch.zeros(3, 4, 4)])
    assert batch.shape == (2, 3, 4, 4)
    assert not batch.is_pinned()
    with pytest.raises(ValueError, match="cannot collate"):
        collate([torch.ones(3, 4, 4), torch.ones(3, 2, 2)])
    with pytest.raises(ValueError, match="empty"):
        collate([])
