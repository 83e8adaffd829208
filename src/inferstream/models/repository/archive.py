"""A `model.pt2` vetted before `torch.export.load` reads it, so that loading runs none of the
file's code.

torch.export.load of the pinned torch (2.14) is not safe on a file from someone else; its
docstring says so ("uses pickle under the hood ... Never load data from an untrusted source",
https://docs.pytorch.org/docs/stable/export.html#torch.export.load). Reading its source
(torch/export/pt2_archive/_package.py, torch/_export/serde/serialize.py, torch/export/_unlift.py):

- weights and constants that are tensor subclasses are read with `torch.load(...,
  weights_only=False)`, "opaque" constants with `pickle.loads`, TorchBind objects with
  TorchScript's unpickler: refused here unless every payload is a plain tensor;
- the sample inputs are read with `weights_only=True` and, where that fails, again with
  `weights_only=False`: here they must load with `weights_only=True`;
- an archive holding AOTInductor code (`data/aotinductor/`) has its shared library loaded:
  refused;
- a file of the format before torch 2.8 is read by the old path, which falls back to
  `weights_only=False` too: refused (save it again);
- every symbolic shape expression is parsed with `sympy.sympify`, which is Python's `eval`:
  here each must be made of sympy's and torch's shape functions, symbol names and numbers;
- `ExportedProgram.module()` `exec`s the guard code the file carries: the loader calls
  `module(check_guards=False)`, which does not.

Operators are looked up by name among torch's registered ones (never imported), so the graph
itself calls only operators.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from inferstream.models.repository.errors import RepositoryError

# The archive's layout, as torch/export/pt2_archive/constants.py names it (torch 2.14).
_VERSION = "archive_version"
_AOTI = "data/aotinductor/"
_MODELS = "models/"
_WEIGHTS_CONFIG = "data/weights/{}_weights_config.json"
_CONSTANTS_CONFIG = "data/constants/{}_constants_config.json"
_LEGACY = ("data/weights/{}.pt", "data/constants/{}.pt")
_SAMPLE_INPUTS = "data/sample_inputs/{}.pt"
_TENSOR_CONSTANT = "tensor_"
#: What a pickle of torch.save, TorchScript's and an older torch.export's archives hold
#: (torch/serialization.py, torch/csrc/jit/serialization/export_module.cpp,
#: torch/_export/__init__.py of torch before 2.8).
_PICKLE = "data.pkl"
_TORCHSCRIPT = ("constants.pkl", "code/")
_OLD_EXPORT = "serialized_exported_program.json"
#: A model file saved by the wrong function, and what to do about it.
PICKLED = ("a torch.save pickle (a state_dict or a pickled module), not a model: save the "
           "module with torch.export.save as model.pt2, or torch.jit.save as model.pt")

#: What the shape expressions torch.export writes are made of: sympy's constructors (as
#: `srepr` prints them), torch's shape functions (torch/utils/_sympy/functions.py), the
#: assumptions a symbol is made with, and symbol names (s0, u3, ...).
_EXPRESSION_NAMES = frozenset({
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Eq",
    "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan",
    "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "Piecewise", "ITE", "true",
    "false", "True", "False", "oo", "zoo", "nan", "Infinity", "NegativeInfinity", "floor",
    "ceiling", "sqrt", "int_oo", "IntInfinity", "NegativeIntInfinity", "precision",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt",
    "FloorToInt", "CeilDiv", "IntTrueDiv", "FloatTrueDiv", "LShift", "RShift",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt",
    "RoundDecimal", "ToFloat", "FloatPow", "PowByNatural", "Identity",
    "commutative", "complex", "even", "extended_negative", "extended_nonnegative",
    "extended_nonpositive", "extended_nonzero", "extended_positive", "extended_real", "finite",
    "infinite", "integer", "negative", "noninteger", "nonnegative", "nonpositive", "nonzero",
    "odd", "positive", "rational", "real", "zero",
})
_SYMBOL = re.compile(r"(?:s|u|zf|zuf)\d+")
_STRING_CONTENT = re.compile(r"[A-Za-z0-9_.+-]*")
_OPERATORS = frozenset({"(", ")", ",", "=", "+", "-", "*", "/", "//", "**", "%", "<", ">",
                        "<=", ">=", "==", "!=", "&", "|", "~"})
_LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT,
           tokenize.DEDENT}


def vet_export_archive(path: Path) -> None:
    """RepositoryError unless `path` is a torch.export archive that loads without running
    code of its own (the module's docstring says what is refused and why)."""
    try:
        with zipfile.ZipFile(path) as archive:
            _Vetting(path, archive).run()
    except (zipfile.BadZipFile, OSError) as exc:
        raise RepositoryError(path, f"not a torch.export file (torch.export.save): {exc}") \
            from None


def saved_by(path: Path) -> str | None:
    """Which of `torch.save`, `torch.jit.save` and `torch.export.save` wrote the archive at
    `path`, by the entries each writes (None: none of them, or not a zip file)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return None
    entries = {name.split("/", 1)[1] for name in names if "/" in name}
    if entries & {_VERSION, _OLD_EXPORT} or any(e.startswith(_MODELS) for e in entries):
        return "torch.export.save"
    if any(e == _TORCHSCRIPT[0] or e.startswith(_TORCHSCRIPT[1]) for e in entries):
        return "torch.jit.save"
    return "torch.save" if _PICKLE in entries else None


class _Vetting:
    def __init__(self, path: Path, archive: zipfile.ZipFile) -> None:
        self.path = path
        self.archive = archive

    def fail(self, reason: str) -> RepositoryError:
        return RepositoryError(self.path, f"{reason}; refused (loading it could run code)")

    def run(self) -> None:
        names = self.archive.namelist()
        if not names or len(set(names)) != len(names):
            raise self.fail("an empty archive or one with duplicate entries")
        self.root = names[0].split("/", 1)[0] + "/"
        if any(not name.startswith(self.root) for name in names):
            raise self.fail("entries outside the archive's folder")
        entries = {name[len(self.root):] for name in names}
        if _VERSION not in entries:
            self.saved_otherwise()
            raise self.fail("written by torch.export.save of a torch before 2.8 (no "
                            "archive_version): save it again with this torch")
        if any(entry.startswith(_AOTI) for entry in entries):
            raise self.fail("holds AOTInductor native code, which torch loads as it reads")
        models = [e[len(_MODELS):-len(".json")] for e in entries
                  if e.startswith(_MODELS) and e.endswith(".json")]
        for model in models:
            self.vet_model(model, entries)

    def saved_otherwise(self) -> None:
        """RepositoryError naming the function that wrote the file where it is not
        torch.export.save: TorchScript belongs in model.pt, a pickle is no model."""
        saver = saved_by(self.path)
        if saver == "torch.jit.save":
            raise RepositoryError(self.path, "written by torch.jit.save (TorchScript), not "
                                  "torch.export.save: rename it model.pt")
        if saver == "torch.save":
            raise RepositoryError(self.path, PICKLED)

    def vet_model(self, model: str, entries: set[str]) -> None:
        for legacy in _LEGACY:
            if legacy.format(model) in entries:
                raise self.fail(f"{legacy.format(model)} is a pickle of the old format")
        for fqn, payload in self.payloads(_WEIGHTS_CONFIG.format(model), entries):
            if payload.get("use_pickle") is not False:
                raise self.fail(f"weight {fqn} is pickled (a tensor subclass)")
        for fqn, payload in self.payloads(_CONSTANTS_CONFIG.format(model), entries):
            if payload.get("use_pickle") is not False or \
                    not str(payload.get("path_name", "")).startswith(_TENSOR_CONSTANT):
                raise self.fail(f"constant {fqn} is a pickled object, not a plain tensor")
        self.vet_sample_inputs(_SAMPLE_INPUTS.format(model), entries)
        for expression in _expressions(self.json(f"{_MODELS}{model}.json")):
            why = unsafe_expression(expression)
            if why:
                raise self.fail(f"a shape expression {why}, which sympy would evaluate")

    def payloads(self, entry: str, entries: set[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        if entry not in entries:
            return
        config = self.json(entry).get("config", {})
        for fqn, payload in (config.items() if isinstance(config, dict) else ()):
            yield fqn, payload if isinstance(payload, dict) else {}

    def vet_sample_inputs(self, entry: str, entries: set[str]) -> None:
        if entry not in entries:
            return
        import torch

        try:
            torch.load(io.BytesIO(self.archive.read(self.root + entry)), weights_only=True)
        except Exception as exc:  # torch would retry with weights_only=False
            first = (str(exc).strip().splitlines() or [""])[0][:120]
            raise self.fail(f"its sample inputs are more than tensors ({first})") from None

    def json(self, entry: str) -> dict[str, Any]:
        try:
            value = json.loads(self.archive.read(self.root + entry))
        except (ValueError, KeyError) as exc:
            raise RepositoryError(self.path, f"{entry} is not readable JSON: {exc}") from None
        return value if isinstance(value, dict) else {}


def _expressions(value: Any) -> Iterator[str]:
    """Every `expr_str` of a serialized program, however deep."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "expr_str" and isinstance(item, str):
                yield item
            else:
                yield from _expressions(item)
    elif isinstance(value, list):
        for item in value:
            yield from _expressions(item)


def unsafe_expression(expression: str) -> str | None:
    """Why `expression` is not one torch.export writes (None: it is)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(expression).readline))
    except (tokenize.TokenError, SyntaxError):
        return "does not parse"
    for token in tokens:
        kind, text = token.type, token.string
        if kind == tokenize.NAME and not (text in _EXPRESSION_NAMES or _SYMBOL.fullmatch(text)):
            return f"names {text!r}"
        if kind == tokenize.STRING and (text[0] not in "'\"" or
                                        not _STRING_CONTENT.fullmatch(text[1:-1])):
            return f"holds the string {text[:40]}"
        if kind == tokenize.OP and text not in _OPERATORS:
            return f"uses {text!r}"
        if kind not in (tokenize.NAME, tokenize.STRING, tokenize.OP, tokenize.NUMBER,
                        *_LAYOUT):
            return f"holds {text[:40]!r}"
    return None
