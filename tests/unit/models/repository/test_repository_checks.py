"""A broken repository is one line per problem, naming the file and the reason (issue 27.1): a
missing file, a bad card, a bad version folder, a model that does not load or whose output does
not fit its card, a handler without --allow-python-models, a handler whose own code fails on
the synthetic batch (at any stage); `models check` prints the lines and the worker refuses to
start with them. A `.pt2` that would run code as it loads is refused before torch reads it."""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inferstream.cli import main
from inferstream.config import WorkerConfig
from inferstream.models import DEFAULT_MAX_PIXELS, UnknownModelError
from inferstream.models.repository import RepositoryError, open_repository
from inferstream.models.repository.archive import unsafe_expression
from inferstream.models.repository.check import check_names, check_repository
from inferstream.serving.loader import model_loader
from tests.unit.models.repository.conftest import (
    CNN_CARD,
    COLOUR_LABELS,
    TENSOR_CARD,
    TENSOR_FEATURES_CARD,
    MakeRepository,
    Models,
)

GOOD = {"1/model.pt2": b"", "labels.txt": COLOUR_LABELS}
Broken = Callable[[Models, MakeRepository], Path]


def layout(card: str | None, files: dict[str, bytes | str], *, name: str = "m") -> Broken:
    """A repository of one model `name` (b"" stands for the CNN's model.pt2)."""
    def make(models: Models, make_repository: MakeRepository) -> Path:
        return make_repository(name, card, {path: content or models.cnn.pt2
                                            for path, content in files.items()})
    return make


def rewritten(entry: str, edit: Callable[[bytes], bytes]) -> Broken:
    """The CNN's model.pt2 with one entry of its archive edited."""
    def make(models: Models, make_repository: MakeRepository) -> Path:
        source = zipfile.ZipFile(io.BytesIO(models.cnn.pt2))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                target.writestr(info, edit(data) if info.filename.endswith(entry) else data)
        return make_repository("m", CNN_CARD, {"1/model.pt2": out.getvalue()})
    return make


def with_native_code(models: Models, make_repository: MakeRepository) -> Path:
    """The CNN's model.pt2 with an AOTInductor library added, as aoti_compile_and_package
    writes one."""
    out = io.BytesIO(models.cnn.pt2)
    with zipfile.ZipFile(out, "a") as archive:
        root = archive.namelist()[0].split("/")[0]
        archive.writestr(f"{root}/data/aotinductor/model/model.so", b"\x7fELF")
    return make_repository("m", CNN_CARD, {"1/model.pt2": out.getvalue()})


def pickled(data: bytes) -> bytes:
    config = json.loads(data)
    next(iter(config["config"].values()))["use_pickle"] = True
    return json.dumps(config).encode()


def evaluated(data: bytes) -> bytes:
    """A shape expression that sympy would eval into a file written."""
    program = data.decode()
    payload = "__import__('pathlib').Path('pwned').touch()"
    return program.replace("Symbol('s", payload + " or Symbol('s", 1).encode()


def static_batch(models: Models, make_repository: MakeRepository) -> Path:
    return make_repository("m", CNN_CARD, {"1/model.pt2": models.static.pt2})


class ItemOfTheBatch(torch.nn.Module):
    """Runs on a batch of 1 only: `.item()` of the batch's first feature."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :3] * (float(x[:, 0].item()) + 1.0)


def scripted(module: torch.nn.Module) -> bytes:
    """`module` scripted and saved with torch.jit.save."""
    out = io.BytesIO()
    with warnings.catch_warnings():  # TorchScript is deprecated upstream
        warnings.simplefilter("ignore", FutureWarning)
        torch.jit.save(torch.jit.script(module.eval()), out)
    return out.getvalue()


def batch_of_one_only(models: Models, make_repository: MakeRepository) -> Path:
    return make_repository("m", TENSOR_CARD, {"1/model.pt": scripted(ItemOfTheBatch())})


def saved_with_torch_save(file: str, *, whole: bool) -> Broken:
    """The CNN saved with torch.save as `file`: its state_dict, or the module pickled."""
    def make(models: Models, make_repository: MakeRepository) -> Path:
        out = io.BytesIO()
        torch.save(models.cnn.module if whole else models.cnn.module.state_dict(), out)
        return make_repository("m", CNN_CARD, {f"1/{file}": out.getvalue()})
    return make


def swapped(file: str) -> Broken:
    """The CNN's TorchScript saved as model.pt2, or its export as model.pt."""
    def make(models: Models, make_repository: MakeRepository) -> Path:
        content = models.cnn.pt if file == "model.pt2" else models.cnn.pt2
        return make_repository("m", CNN_CARD, {f"1/{file}": content})
    return make


PICKLED = ("a torch.save pickle (a state_dict or a pickled module), not a model: save the "
           "module with torch.export.save as model.pt2, or torch.jit.save as model.pt")
# (id, repository, the file relative to the repository, the reason)
BROKEN: list[tuple[str, Broken, str, str]] = [
    ("no card", layout(None, GOOD), "m/model.toml", "missing file (every model has a card)"),
    ("unknown key", layout("[input]\nsise = [32, 32]\n", GOOD), "m/model.toml",
     "unknown key input.sise (known: kind, size, resize, mean, std, interpolation, "
     "exif_orientation, shape, dtype)"),
    ("wrong type", layout("[output]\nkind = \"embedding\"\nnormalize = \"yes\"\n", GOOD),
     "m/model.toml", "output.normalize must be true or false, got 'yes'"),
    ("key of another kind", layout("[output]\nkind = \"embedding\"\nsoftmax = false\n", GOOD),
     "m/model.toml", "output.softmax is only for output.kind = \"classification\", and this "
     "card's is \"embedding\": remove it"),
    ("image key on a tensor card",
     layout("[input]\nkind = \"tensor\"\nshape = [6]\nmean = [0.5, 0.5, 0.5]\n", GOOD),
     "m/model.toml", "input.mean is only for input.kind = \"image\", and this card's is "
     "\"tensor\": remove it"),
    ("bad kind", layout("[output]\nkind = \"segmentation\"\n", GOOD), "m/model.toml",
     "output.kind 'segmentation' is not one of classification, embedding, tensor"),
    ("size not two ints", layout("[input]\nsize = [32]\n", GOOD), "m/model.toml",
     "input.size must be 2 positive integers, got [32]"),
    ("mean not three floats", layout("[input]\nmean = [0.5, \"a\", 0.5]\n", GOOD),
     "m/model.toml", "input.mean must be three numbers (one per RGB channel), got "
     "[0.5, 'a', 0.5]"),
    ("not TOML", layout("[input\n", GOOD), "m/model.toml",
     "not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 7)"),
    ("version not a positive integer", layout(CNN_CARD, {**GOOD, "v2/model.pt2": b""}),
     "m/v2", "a version folder's name is a whole number from 1 to 2147483647 (1, 2, ...)"),
    ("version 0", layout(CNN_CARD, {**GOOD, "0/model.pt2": b""}), "m/0",
     "a version folder's name is a whole number from 1 to 2147483647 (1, 2, ...)"),
    ("version above 2^31-1", layout(CNN_CARD, {**GOOD, "202612071053/model.pt2": b""}),
     "m/202612071053", "version 202612071053 is above 2147483647, the highest a version can "
     "be (versions are a whole number from 1 to 2147483647): renumber the folder, e.g. the "
     "next of 1, 2, ... or the time in seconds since the epoch"),
    ("no version", layout(CNN_CARD, {"labels.txt": COLOUR_LABELS}), "m",
     "no version folder (1, 2, ...) holding a model file"),
    ("no model file", layout(CNN_CARD, {**GOOD, "2/notes.txt": "x"}), "m/2",
     "no model file (model.pt2, model.pt, model.py)"),
    ("two model files", layout(CNN_CARD, {**GOOD, "1/model.pt": b"x"}), "m/1",
     "two model files (model.pt2, model.pt): keep one"),
    ("labels file missing", layout(CNN_CARD + "[output]\nlabels = \"classes.txt\"\n", GOOD),
     "m/classes.txt", "missing file (output.labels of the card)"),
    ("labels count", layout(CNN_CARD, {**GOOD, "labels.txt": "a\nb\nc\nd\n"}),
     "m/1/model.pt2", "the model outputs 3 classes and its labels file holds 4 labels"),
    ("not an archive", layout(CNN_CARD, {"1/model.pt2": b"not a zip"}), "m/1/model.pt2",
     "not a torch.export file (torch.export.save): File is not a zip file"),
    ("not TorchScript", layout(CNN_CARD, {"1/model.pt": b"not a zip"}), "m/1/model.pt",
     "does not load: RuntimeError: PytorchStreamReader failed reading zip archive: not a ZIP "
     "archive"),
    ("state_dict as model.pt", saved_with_torch_save("model.pt", whole=False),
     "m/1/model.pt", PICKLED),
    ("pickled module as model.pt", saved_with_torch_save("model.pt", whole=True),
     "m/1/model.pt", PICKLED),
    ("state_dict as model.pt2", saved_with_torch_save("model.pt2", whole=False),
     "m/1/model.pt2", PICKLED),
    ("TorchScript as model.pt2", swapped("model.pt2"), "m/1/model.pt2",
     "written by torch.jit.save (TorchScript), not torch.export.save: rename it model.pt"),
    ("torch.export as model.pt", swapped("model.pt"), "m/1/model.pt",
     "written by torch.export.save, not torch.jit.save (TorchScript): rename it model.pt2"),
    ("static batch", static_batch, "m/1/model.pt2",
     "its batch dimension is fixed at 2: export it with dynamic_shapes=({0: "
     "torch.export.Dim('batch')},)"),
    ("several outputs, none named", layout(TENSOR_FEATURES_CARD, {"1/model.pt2": b"t"}),
     "m/1/model.pt2", "the model returns 2 outputs (logits, features); name the one to use "
     "with output.tensor"),
    ("output not 2-D", layout(TENSOR_FEATURES_CARD + "tensor = \"features\"\n",
                              {"1/model.pt2": b"t"}),
     "m/1/model.pt2", "output features of an embedding model has shape [1, 4, 2]; expected "
     "[batch, dim] (a synthetic batch of 1)"),
    ("input the model refuses", layout(TENSOR_FEATURES_CARD.replace("[6]", "[5]") +
                                       "tensor = \"logits\"\n", {"1/model.pt2": b"t"}),
     "m/1/model.pt2", "fails on a synthetic batch of 1: RuntimeError: Expected input at "
     "*args[0].shape[1] to be equal to 6, but got 5"),
    ("TorchScript raises", batch_of_one_only, "m/1/model.pt", "fails on a synthetic batch "
     "of 2: RuntimeError: a Tensor with 2 elements cannot be converted to Scalar; a batch of "
     "1 passes: where the model takes no more, set [serving] max_batch = 1 in its card"),
    ("shadows a built-in", layout(CNN_CARD, GOOD, name="resnet50"), "resnet50",
     "shadows the built-in model resnet50: give the folder another name"),
    ("name no job can give", layout(CNN_CARD, GOOD, name="_colors"), "_colors",
     "no job can name this model: a model's name is made of letters, digits, '.', '_' and "
     "'-', starting with a letter or a digit, at most 128 characters; rename the folder"),
    ("name with a space", layout(CNN_CARD, GOOD, name="my colors"), "my colors",
     "no job can name this model"),
    ("handler not allowed", layout(CNN_CARD, {"1/model.py": "raise SystemExit"}),
     "m/1/model.py", "a Python handler is code of the model's author, run inside the "
     "worker: served only with --allow-python-models"),
    ("pickled weight", rewritten("model_weights_config.json", pickled), "m/1/model.pt2",
     "weight 0.weight is pickled (a tensor subclass); refused (loading it could run code)"),
    ("native code", with_native_code, "m/1/model.pt2", "holds AOTInductor native code, which "
     "torch loads as it reads; refused (loading it could run code)"),
    ("code in a shape", rewritten("models/model.json", evaluated), "m/1/model.pt2",
     "a shape expression names '__import__', which sympy would evaluate; refused (loading "
     "it could run code)"),
]


def fix_tensor_model(models: Models, make_repository: MakeRepository,
                     make: Broken) -> Path:
    """`make`, with b"t" standing for the tensor model's model.pt2."""
    root = make(models, make_repository)
    for path in root.rglob("model.pt2"):
        if path.read_bytes() == b"t":
            path.write_bytes(models.tensor.pt2)
    return root


@pytest.fixture(params=BROKEN, ids=[case[0] for case in BROKEN])
def broken(request: pytest.FixtureRequest, models: Models,
           make_repository: MakeRepository) -> tuple[Path, str]:
    """A broken repository and the one line `models check` says of it."""
    _, make, path, reason = request.param
    root = fix_tensor_model(models, make_repository, make)
    return root, f"{root / path}: {reason}"


def test_a_broken_repository_is_one_line_naming_the_file_and_the_reason(
        broken: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    root, line = broken
    monkeypatch.chdir(root)  # where the shape expression would write its file
    problems = check_repository(open_repository(str(root)), allow_python=False,
                                max_pixels=DEFAULT_MAX_PIXELS)
    assert len(problems) == 1
    assert problems[0].startswith(line)
    assert "\n" not in problems[0]
    assert not (root / "pwned").exists()


def test_models_check_prints_the_lines_and_the_worker_refuses_to_start(
        broken: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, line = broken
    assert main(["models", "check", "--model-repository", str(root)]) == 1
    assert capsys.readouterr().out.startswith(line)
    name = next(p.name for p in root.iterdir())
    settings = WorkerConfig(model_repository=str(root), models=(name,), compile="off")
    with pytest.raises(RepositoryError) as refused:
        check_names(open_repository(str(root)), settings.models, allow_python=False)
        model_loader(settings, "cpu")(name)
    assert str(refused.value).startswith(line)


def test_the_worker_refuses_a_bad_card_before_it_connects(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repository("m", "[input]\nsize = [32]\n", {"1/model.pt2": models.cnn.pt2})
    code = main(["worker", "--model-repository", str(root), "--model", "m",
                 "--bootstrap-servers", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"inferstream: error: {root}/m/model.toml: input.size must be 2 positive "
                   "integers, got [32]\n")


def test_a_good_repository_checks_ok_and_lists_its_models(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    make_repository("colours", CNN_CARD, {"1/model.pt": models.cnn.pt, "labels.txt":
                                          COLOUR_LABELS, "2/model.pt2": models.cnn.pt2})
    root = make_repository("vectors", TENSOR_FEATURES_CARD + "tensor = \"logits\"\n",
                           {"1/model.pt2": models.tensor.pt2})
    assert main(["models", "check", "--model-repository", f"file://{root}"]) == 0
    assert capsys.readouterr().out == f"OK: 2 models in {root}\n"
    assert main(["models", "list", "--model-repository", str(root)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "colours  versions 1 (torchscript), 2 (export)  input image [32, 32]  output "
        "classification",
        "vectors  versions 1 (export)  input tensor [6] float32  output embedding ['logits']"]


def test_a_name_neither_built_in_nor_in_the_repository_is_unknown(
        models: Models, make_repository: MakeRepository) -> None:
    root = make_repository("colours", CNN_CARD, {"1/model.pt2": models.cnn.pt2})
    with pytest.raises(UnknownModelError,
                       match=r"unknown model 'colors' \(not in the repository .*\); known "
                             r"models: alexnet, .*, efficientnet_lite0, colours"):
        check_names(open_repository(str(root)), ["resnet50", "colors"], allow_python=False)


def test_a_worker_given_a_version_is_told_it_serves_the_newest(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repository("colours", CNN_CARD, {"1/model.pt2": models.cnn.pt2})
    code = main(["worker", "--model-repository", str(root), "--model", "colours:1",
                 "--bootstrap-servers", "127.0.0.1:1"])
    assert code == 2
    assert capsys.readouterr().err == (
        f"inferstream: error: {root}/colours: a worker serves the newest versions of a model "
        "(model_versions, or the card's [versions] latest), not one named: --model colours; "
        "a job pins its version (submit --model colours:1)\n")


def test_a_repository_that_is_not_a_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RepositoryError, match=f"^{tmp_path}/none: no such folder"):
        open_repository(str(tmp_path / "none"))
    with pytest.raises(RepositoryError, match="a local folder or a file:// URI"):
        open_repository("s3://bucket/models")


@pytest.mark.parametrize(("expression", "why"), [
    ("Symbol('s77', positive=True, integer=True)", None),
    ("Mul(Integer(2), FloorDiv(Symbol('s0', integer=True), Integer(3)))", None),
    ("Max(1, s0 + 2*u1)", None),
    ("exec(chr(105) + chr(100))", "names 'exec'"),
    ("Symbol('s0').__class__", "uses '.'"),
    ("Symbol('x; import os')", "holds the string 'x; import os'"),
    ("s0 if True else 1", "names 'if'"),
    ("[s0][0]", "uses '['"),
])
def test_shape_expressions_pass_only_as_torch_writes_them(expression: str,
                                                          why: str | None) -> None:
    assert unsafe_expression(expression) == why


def handler(preprocess: str, predict: str = "return batch[:, :3] * 1.0") -> str:
    """A handler's model.py whose preprocess and predict have these bodies."""
    return (f"import torch\nfrom inferstream.models import ItemError\n\n\n"
            f"class Handler:\n"
            f"    def preprocess(self, data):\n        {preprocess}\n\n"
            f"    def predict(self, batch):\n        {predict}\n\n\n"
            f"def load(version_dir, device):\n    return Handler()\n")


TEXT = "text = data.decode('utf-8'); return torch.full((6,), float(len(text)))"
ZEROS = "return torch.zeros(6)"
NPY = "a .npy of zeros, [6] float32"
# (id, model.py, the reason): each stage of the check where the handler's own code fails
FAILING_HANDLERS = [
    ("preprocess raises", handler(TEXT), f"its preprocess fails on the check's synthetic "
     f"tensor item ({NPY}): model error: UnicodeDecodeError: 'utf-8' codec can't decode byte "
     "0x93 in position 0: invalid start byte"),
    ("preprocess refuses", handler("raise ItemError('not text')"), "its preprocess fails on "
     f"the check's synthetic tensor item ({NPY}): not text"),
    ("preprocess returns no tensor", handler("return [0.0] * 6"), "its preprocess fails on "
     f"the check's synthetic tensor item ({NPY}): model error: preprocess returned a list, "
     "not a tensor"),
    ("predict raises", handler(ZEROS, "raise KeyError('scale')\n"), "its predict fails on "
     "a synthetic batch of 1: KeyError: 'scale'"),
    ("output unreadable", handler(ZEROS, "return torch.zeros(len(batch), 3, device='meta')"),
     "its output on a synthetic batch of 1 does not read as a classification output: "
     "NotImplementedError: Cannot copy out of meta tensor; no data!"),
]


@pytest.mark.parametrize(("code", "reason"), [case[1:] for case in FAILING_HANDLERS],
                         ids=[case[0] for case in FAILING_HANDLERS])
def test_a_handler_failing_on_the_synthetic_batch_is_one_line_naming_the_stage(
        code: str, reason: str, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = make_repository("text", TENSOR_CARD, {"1/model.py": code})
    line = f"{root}/text/1/model.py: {reason}"
    args = ["models", "check", "--model-repository", str(root), "--allow-python-models"]
    assert main(args) == 1
    assert capsys.readouterr().out == f"{line}\n"
    settings = WorkerConfig(model_repository=str(root), models=("text",), compile="off",
                            allow_python_models=True)
    with pytest.raises(RepositoryError) as refused:  # the worker's start: exit 2, no restart
        model_loader(settings, "cpu")("text")
    assert str(refused.value) == line


def test_every_bad_version_folder_is_a_line_of_its_own_and_the_good_ones_are_still_run(
        models: Models, make_repository: MakeRepository,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One line per problem, as the docs say: not only the first bad folder of a model, and
    the versions that can be read are loaded and run as well (one that fails says so)."""
    root = make_repository("m", CNN_CARD, {
        "01/model.pt2": models.cnn.pt2, "v2/model.pt2": models.cnn.pt2,
        "3/model.pt2": models.cnn.pt2, "4/model.pt2": b"not a model", "5/notes.txt": "x",
        "labels.txt": COLOUR_LABELS})
    assert main(["models", "check", "--model-repository", str(root)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        f"{root}/m/01", f"{root}/m/v2", f"{root}/m/5", f"{root}/m/4/model.pt2"]
    assert lines[2].endswith("no model file (model.pt2, model.pt, model.py)")
    with pytest.raises(RepositoryError, match=f"^{root}/m/01: a version folder's name"):
        open_repository(str(root)).model("m")
