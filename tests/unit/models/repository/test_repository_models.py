"""A user's own models served from a repository (issue 27.1, 27.4, 27.5): a classifier saved with
torch.export or TorchScript labels items as the module itself does, an embedding model answers
its vectors, a tensor model reads `.npy` items and answers named tensors; the card picks the
version's labels, the output and the forward path's settings."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data as photos

from inferstream.config import WorkerConfig
from inferstream.models import DEFAULT_MAX_PIXELS, ItemError
from inferstream.models.outputs import Embedding, Tensors
from inferstream.models.package_build import exported
from inferstream.models.repository import open_repository
from inferstream.models.repository.answers import OutputMismatchError
from inferstream.models.repository.check import load_checked
from inferstream.models.repository.model import RepositoryModel
from inferstream.serving.loader import model_loader, model_settings
from tests.unit.models.repository.conftest import (
    CNN_CARD,
    COLOUR_LABELS,
    COLOURS,
    FEATURES,
    TENSOR_CARD,
    MakeRepository,
    Models,
    export,
    script,
)
from tests.unit.support.photos import encode


def load(root: Path, name: str, *, allow_python: bool = False) -> RepositoryModel:
    return load_checked(open_repository(str(root)), name, "cpu", allow_python=allow_python,
                        max_pixels=DEFAULT_MAX_PIXELS)


def coloured(colour: int, seed: int) -> bytes:
    """A JPEG, mostly of one colour, with some noise and a different size each time."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 80, (40 + seed, 50 + 2 * seed, 3), dtype=np.uint8)
    pixels[..., colour] += 170
    return encode(pixels)


def photo_items() -> list[bytes]:
    return [coloured(c, seed) for seed, c in enumerate((0, 1, 2, 2, 1))] + \
        [encode(photos.chelsea()), encode(photos.coffee())]


@pytest.mark.parametrize("file", ["model.pt2", "model.pt"])
def test_a_classifier_labels_items_as_its_module_does(
        models: Models, make_repository: MakeRepository, file: str) -> None:
    content = models.cnn.pt2 if file == "model.pt2" else models.cnn.pt
    root = make_repository("colours", CNN_CARD + "resize = 40\n",
                           {f"1/{file}": content, "labels.txt": COLOUR_LABELS})
    model = load(root, "colours")
    tensors = [model.preprocess(data) for data in photo_items()]
    got = model.predict_items(tensors, top_k=3)
    with torch.no_grad():
        direct = torch.softmax(models.cnn.module(torch.stack(tensors)), dim=1)
    assert (model.name, model.version) == ("colours", "1")
    for answer, scores in zip(got, direct, strict=True):
        assert isinstance(answer, list)
        assert [c for c, _, _ in answer] == scores.argsort(descending=True).tolist()
        assert [label for _, label, _ in answer] == [COLOURS[c] for c, _, _ in answer]
        assert [s for _, _, s in answer] == pytest.approx(
            scores.sort(descending=True).values.tolist(), abs=1e-4)
    # Trained a few steps: the mostly red, green and blue photos are told apart.
    assert [answer[0][1] for answer in got[:5]] == ["red", "green", "blue", "blue", "green"]


def test_the_newest_version_serves_with_its_own_labels(
        models: Models, make_repository: MakeRepository) -> None:
    root = make_repository("colours", CNN_CARD, {
        "1/model.pt": models.cnn.pt, "labels.txt": COLOUR_LABELS,
        "2/model.pt2": models.cnn.pt2, "2/labels.txt": "rouge\nvert\nbleu\n"})
    model = load(root, "colours")
    answer = model.predict_items([model.preprocess(coloured(0, 1))], top_k=1)[0]
    assert model.version == "2"
    assert answer == [(0, "rouge", pytest.approx(answer[0][2]))]


def test_a_classifier_without_labels_answers_class_numbers(
        models: Models, make_repository: MakeRepository) -> None:
    root = make_repository("colours", CNN_CARD, {"1/model.pt2": models.cnn.pt2})
    model = load(root, "colours")
    answer = model.predict_items([model.preprocess(coloured(2, 3))], top_k=3)[0]
    assert model.labels == ("class_0", "class_1", "class_2")
    assert isinstance(answer, list) and answer[0][:2] == (2, "class_2")


class Widening(torch.nn.Module):
    """A classifier of 3 classes, or of 4 for items whose values add up above 10."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = 4 if bool(x.sum() > 10) else 3
        return torch.zeros(x.shape[0], width)


def test_a_classifier_without_labels_that_outputs_other_classes_later_says_so(
        make_repository: MakeRepository) -> None:
    """The check named its 3 classes class_0 to class_2; a batch of 4 classes fails, and the
    reason does not send the user looking for a labels file that there is none of."""
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        saved = io.BytesIO()
        torch.jit.save(torch.jit.script(Widening()), saved)
    model = load(make_repository("widening", TENSOR_CARD, {"1/model.pt": saved.getvalue()}),
                 "widening")
    assert model.labels == ("class_0", "class_1", "class_2")
    with pytest.raises(OutputMismatchError) as failed:
        model.predict_items([model.preprocess(npy(np.full(FEATURES, 5.0, np.float32)))], 1)
    assert str(failed.value) == ("the model outputs 4 classes; it output 3 at its check, "
                                 "which named them class_0 to class_2 (it has no labels "
                                 "file)")


def test_a_card_and_labels_saved_with_a_byte_order_mark_read_as_without(
        models: Models, make_repository: MakeRepository) -> None:
    """Windows editors begin a UTF-8 file with a BOM: it is no part of the TOML nor of the
    first label, nor of a JSON item."""
    bom = "\ufeff"
    root = make_repository("colours", bom + CNN_CARD + "resize = 40\n", {
        "1/model.pt2": models.cnn.pt2, "labels.txt": bom + "rouge\nvert\nbleu\n"})
    model = load(root, "colours")
    answer = model.predict_items([model.preprocess(coloured(0, 1))], top_k=1)[0]
    assert model.labels == ("rouge", "vert", "bleu")
    assert answer == [(0, "rouge", pytest.approx(answer[0][2]))]
    vectors = load(make_repository("vectors", TENSOR_CARD + "[output]\ntensor = 0\n",
                                   {"1/model.pt2": models.tensor.pt2}), "vectors")
    item = (bom + json.dumps([1.0] * FEATURES)).encode()
    assert vectors.preprocess(item).tolist() == [1.0] * FEATURES


@pytest.mark.parametrize("normalize", [True, False])
def test_an_embedding_model_answers_the_modules_vectors(
        models: Models, make_repository: MakeRepository, normalize: bool) -> None:
    card = CNN_CARD + f"[output]\nkind = \"embedding\"\nnormalize = {str(normalize).lower()}\n"
    root = make_repository("body", card, {"1/model.pt2": models.embedder.pt2})
    model = load(root, "body")
    tensors = [model.preprocess(data) for data in photo_items()]
    got = model.predict_items(tensors, top_k=5)
    with torch.no_grad():
        direct = models.embedder.module(torch.stack(tensors))
    if normalize:
        direct = torch.nn.functional.normalize(direct, dim=1)
    for answer, vector in zip(got, direct, strict=True):
        assert isinstance(answer, Embedding)
        assert answer.vector == pytest.approx(vector.tolist(), abs=1e-5)
        if normalize:
            assert float(np.linalg.norm(answer.vector)) == pytest.approx(1.0)


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def test_a_tensor_model_reads_npy_and_json_items_of_its_shape(
        models: Models, make_repository: MakeRepository) -> None:
    card = TENSOR_CARD + "[output]\ntensor = \"logits\"\n"
    root = make_repository("vectors", card, {"1/model.pt2": models.tensor.pt2,
                                             "labels.txt": COLOUR_LABELS})
    model = load(root, "vectors")
    rows = np.random.default_rng(0).random((3, FEATURES), dtype=np.float32)
    items = [npy(rows[0]), npy(rows[1]), json.dumps(rows[2].tolist()).encode()]
    got = model.predict_items([model.preprocess(item) for item in items], top_k=1)
    with torch.no_grad():
        logits = models.tensor.module(torch.from_numpy(rows))["logits"]
    assert [answer[0][0] for answer in got if isinstance(answer, list)] == \
        logits.argmax(dim=1).tolist()
    with pytest.raises(ItemError, match=r"a tensor of shape \[4\] float32; the model takes "
                                        r"\[6\] float32"):
        model.preprocess(npy(np.zeros(4, dtype=np.float32)))
    with pytest.raises(ItemError, match="float64; the model takes"):
        model.preprocess(npy(np.zeros(FEATURES)))
    with pytest.raises(ItemError, match="Object arrays cannot be loaded"):
        model.preprocess(npy(np.array([None] * FEATURES, dtype=object)))
    with pytest.raises(ItemError, match=r"not a \.npy file"):
        model.preprocess(b"\xff\xd8\xff a JPEG")


def test_a_tensor_output_answers_every_output_with_dtype_and_shape(
        models: Models, make_repository: MakeRepository) -> None:
    card = TENSOR_CARD + "[output]\nkind = \"tensor\"\n"
    root = make_repository("vectors", card, {"1/model.pt2": models.tensor.pt2})
    model = load(root, "vectors")
    rows = np.random.default_rng(1).random((2, FEATURES), dtype=np.float32)
    got = model.predict_items([model.preprocess(npy(row)) for row in rows], top_k=1)
    with torch.no_grad():
        direct = models.tensor.module(torch.from_numpy(rows))
    for i, answer in enumerate(got):
        assert isinstance(answer, Tensors)
        assert [(t.name, t.dtype, t.shape) for t in answer.tensors] == \
            [("logits", "float32", (3,)), ("features", "float32", (4, 2))]
        for named in answer.tensors:
            values = np.frombuffer(named.data, dtype="<f4").reshape(named.shape)
            assert values == pytest.approx(direct[named.name][i].numpy(), abs=1e-6)


def test_the_card_sets_the_forward_path_and_the_batch(
        models: Models, make_repository: MakeRepository) -> None:
    serving = '[serving]\nmax_batch = 4\nprecision = "fp32"\ncompile = "off"\n'
    make_repository("colours", CNN_CARD + serving, {"1/model.pt2": models.cnn.pt2})
    root = make_repository("vectors", TENSOR_CARD + "[output]\ntensor = 0\n",
                           {"1/model.pt2": models.tensor.pt2})
    settings = WorkerConfig(model_repository=f"file://{root}", compile="off",
                            precision="bf16", max_batch=64)
    load_model = model_loader(settings, "cpu")
    image, vectors = load_model("colours"), load_model("vectors")
    assert isinstance(image, RepositoryModel) and isinstance(vectors, RepositoryModel)
    options = model_settings(settings, image)
    assert (options.max_batch, options.precision, options.compile) == (4, "fp32", "off")
    assert image.dtype == torch.float32 and image.memory_format == torch.channels_last
    # Items of one dimension make batches of two: channels-last does not apply.
    assert model_settings(settings, vectors).channels_last == "off"
    assert vectors.dtype == torch.bfloat16
    answer = vectors.predict_items([vectors.preprocess(npy(np.ones(FEATURES, np.float32)))], 2)
    assert isinstance(answer[0], list) and len(answer[0]) == 2
    assert image.predict_items([image.synthetic_item()], 1)[0] != []


def test_a_torchscript_model_runs_eager_without_trying_to_compile(
        models: Models, make_repository: MakeRepository) -> None:
    """A ScriptModule cannot be exported: the worker's compile of one failed, every start,
    with a line that blamed the model (`does not compile: RuntimeError: Tried to serialize
    object __torch__...`)."""
    root = make_repository("colours", CNN_CARD + "[serving]\ncompile = \"on\"\n",
                           {"1/model.pt": models.cnn.pt})
    model = load(root, "colours")
    options = model_settings(WorkerConfig(compile="auto", precision="bf16"), model)
    assert (options.compile, options.precision, options.channels_last) == ("off", "bf16", "on")


def test_an_exported_model_reaches_the_compilers_child_as_the_worker_serves_it(
        models: Models, make_repository: MakeRepository) -> None:
    """The compiled forward pass is built in a child process that gets the module and an
    example batch pickled (`packages.AotiCompiler`): the module of a torch.export program did
    not pickle, so no exported repository model compiled (`does not compile: AttributeError:
    Can't pickle local object '_create_stateful_graph_module.<locals>.<lambda>'`)."""
    root = make_repository("colours", CNN_CARD, {"1/model.pt2": models.cnn.pt2})
    settings = WorkerConfig(model_repository=f"file://{root}", compile="off", precision="bf16")
    model = model_loader(settings, "cpu")("colours")
    assert isinstance(model, RepositoryModel)
    example = model.to_inputs(torch.stack([model.synthetic_item()] * 2))
    pickled = io.BytesIO()
    torch.save((model.module, example), pickled)
    pickled.seek(0)
    module, batch = torch.load(pickled, weights_only=False)  # as the child reads them
    program = exported(module, batch)  # what the child compiles
    with torch.no_grad():
        assert torch.equal(program.module()(batch), model.module(example))
    assert next(module.parameters()).dtype == torch.bfloat16


HANDLER = f'''
import torch


class Handler:
    def __init__(self, folder, device):
        self.scale = float((folder / "scale.txt").read_text())

    def preprocess(self, data):
        if data == b"bad":
            raise ValueError("no such word\\nsecond line")
        return torch.tensor([float(len(data))] * {FEATURES})

    def predict(self, batch):
        return batch * self.scale


def load(version_dir, device):
    return Handler(version_dir, device)
'''


def test_a_python_handler_serves_where_allowed(make_repository: MakeRepository) -> None:
    card = TENSOR_CARD + "[output]\nkind = \"embedding\"\n"
    root = make_repository("lengths", card, {"1/model.py": HANDLER, "1/scale.txt": "0.5"})
    model = load(root, "lengths", allow_python=True)
    answer = model.predict_items([model.preprocess(b"abcd")], top_k=1)[0]
    assert answer == Embedding((2.0,) * FEATURES)
    assert model_settings(WorkerConfig(), model).compile == "off"


def test_a_handlers_preprocess_failing_on_an_item_is_the_items_model_error(
        make_repository: MakeRepository) -> None:
    card = TENSOR_CARD + "[output]\nkind = \"embedding\"\n"
    root = make_repository("lengths", card, {"1/model.py": HANDLER, "1/scale.txt": "0.5"})
    model = load(root, "lengths", allow_python=True)
    with pytest.raises(ItemError) as failed:  # the item's error, not the worker's
        model.preprocess(b"bad")
    assert failed.value.reason == "model error: ValueError: no such word"


class Doubles(torch.nn.Module):
    """A model saved in float64: it takes float64 batches only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.layer = torch.nn.Linear(FEATURES, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


@pytest.mark.parametrize("file", ["model.pt2", "model.pt"])
def test_a_model_saved_in_float64_passes_its_check_and_serves(
        make_repository: MakeRepository, file: str) -> None:
    """Its float64 items are not cast to float32 before the worker sets its precision (the
    check failed with torch's `mat1 and mat2 must have the same dtype`); it then serves in the
    worker's precision."""
    module = Doubles().eval()
    example = torch.rand(2, FEATURES, dtype=torch.float64)
    saved = export(module, example) if file == "model.pt2" else script(module, example)
    card = TENSOR_CARD + "dtype = \"float64\"\n[output]\nkind = \"embedding\"\n"
    root = make_repository("doubles", card, {f"1/{file}": saved})
    rows = np.random.default_rng(2).random((3, FEATURES))
    with torch.no_grad():
        direct = module(torch.from_numpy(rows))
    checked = load(root, "doubles")
    served = model_loader(WorkerConfig(model_repository=f"file://{root}", compile="off"),
                          "cpu")("doubles")
    for model in (checked, served):
        got = model.predict_items([model.preprocess(npy(row)) for row in rows], top_k=1)
        for answer, vector in zip(got, direct, strict=True):
            assert isinstance(answer, Embedding)
            assert answer.vector == pytest.approx(vector.tolist(), abs=1e-5)


LENGTHS = """
import torch


class Handler:
    def __init__(self):
        self.batches = []

    def preprocess(self, data):
        return torch.tensor([float(b) for b in data])

    def predict(self, batch):
        self.batches.append(list(batch.shape))
        return batch.sum(1, keepdim=True)


def load(version_dir, device):
    return Handler()
"""


def test_a_handlers_items_of_several_shapes_run_in_a_batch_per_shape(
        make_repository: MakeRepository) -> None:
    """A handler whose preprocess makes a tensor of a text's length: a batch of items of
    several lengths failed to stack (`cannot collate shapes (2,) and (3,)`), logged as a
    failed forward pass, and ran again in halves down to single items."""
    card = TENSOR_CARD.replace(f"[{FEATURES}]", "[3]") + "[output]\nkind = \"embedding\"\n"
    root = make_repository("texts", card, {"1/model.py": LENGTHS})
    model = load(root, "texts", allow_python=True)
    handler = model.module.handler
    handler.batches.clear()  # the check's
    items = [model.preprocess(data) for data in (b"\x01\x02", b"\x01\x01\x01", b"\x05\x05",
                                                 b"\x00\x00\x07")]
    answers = model.predict_items(items, top_k=1)
    assert answers == [Embedding((3.0,)), Embedding((3.0,)), Embedding((10.0,)),
                       Embedding((7.0,))]
    assert handler.batches == [[2, 2], [2, 3]]
