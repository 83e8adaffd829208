"""The house's shape, read with ast: each role in its folder, the layers below the roles, and
the size limits (DEVELOPERS.md) that keep every file readable.

Roles (`client`, `controller`, `worker`, `stream`, `sysinfo`) import no other role: what two of
them share lives below them (`serving` behind worker and stream, `jobs` behind client and
controller). The layers (`config`, `schemas`, `models`, `kafka`, `policy`, `serving`, `jobs`,
`supervise` and the top-level modules `errors`, `metrics`, `http`, `signals`) import no
role. Only the command table (`cli`, `commands`) sees every role. `testing/` (the in-memory
Kafka) is for tests: no module of the package imports it. And the controller and the client
never load torch (nor numpy, until `results --format npz` asks for it).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest

import inferstream

PACKAGE = Path(inferstream.__file__).parent
REPO = PACKAGE.parents[1]
ROLES = ("client", "controller", "worker", "stream", "sysinfo")
LAYERS = ("config", "schemas", "models", "kafka", "policy", "serving", "jobs", "errors",
          "metrics", "http", "signals", "supervise", "garbage", "leftovers", "repeats")
#: Files every role may have of its own (DEVELOPERS.md): a name here in two roles is a pattern.
ROLE_SLOTS = {"__init__.py", "run.py", "metrics.py", "errors.py", "source.py", "hooks.py"}


def home(path: Path) -> str:
    """The top-level package or module of the package that `path` belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


@functools.cache
def parsed(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed once for every test that reads it."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imports(path: Path) -> set[str]:
    """The top-level inferstream packages `path` imports, anywhere in it (in functions and
    under TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name.split(".")[1] for name in names if name.startswith("inferstream.")}
    return found


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_role_imports_another_and_no_layer_imports_a_role() -> None:
    wrong = {}
    for path in modules():
        mine = home(path)
        if mine in ROLES:
            bad = (imports(path) & set(ROLES)) - {mine}
        elif mine in LAYERS:
            bad = imports(path) & set(ROLES)
        else:
            continue
        if bad:
            wrong[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert wrong == {}


def test_every_module_is_a_role_a_layer_the_command_table_or_testing() -> None:
    """A new top-level package has to be placed (in the lists above) before it can pass."""
    known = {*ROLES, *LAYERS, "cli", "commands", "testing", "__init__", "__main__", "py"}
    assert {home(path) for path in modules()} <= known


def test_testing_is_imported_by_tests_only() -> None:
    users = [str(p.relative_to(PACKAGE)) for p in modules()
             if home(p) != "testing" and "testing" in imports(p)]
    assert users == []


def test_no_file_name_of_one_role_is_used_by_another() -> None:
    """Apart from the slots every role has (its run module, metrics, source, hooks...)."""
    seen: dict[str, str] = {}
    clashes = []
    for path in modules():
        role = home(path)
        if role not in ROLES or path.name in ROLE_SLOTS:
            continue
        if seen.setdefault(path.name, role) != role:
            clashes.append(f"{seen[path.name]}/{path.name} and {role}/{path.name}")
    assert clashes == []


def python_files() -> list[Path]:
    roots = [REPO / "src", REPO / "tests", REPO / "ops", REPO / "examples"]
    return sorted({*(p for root in roots for p in root.rglob("*.py")),
                   REPO / "ops" / "kafka" / "cluster"})


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_modules_classes_and_functions_stay_within_the_house_limits(path: Path) -> None:
    """Modules <= 400 lines everywhere; in the package and ops/ (tests aside) also classes
    <= 300 and functions <= 40."""
    source = path.read_text(encoding="utf-8")
    assert len(source.splitlines()) <= 400
    if path.is_relative_to(REPO / "tests"):
        return
    too_long = []
    for node in ast.walk(parsed(path)):
        limit = (300 if isinstance(node, ast.ClassDef) else
                 40 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None)
        if limit is not None and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                too_long.append(f"{node.name}: {length} lines (limit {limit})")
    assert too_long == []


CONTROLLER_AND_CLIENT = """
import sys
from inferstream.cli import build_parser
from inferstream.client import job_commands as client
from inferstream.controller import run as controller
from inferstream.models import check_model_name, known_models
from inferstream.client.client import Client
from inferstream.client.listing import recent_jobs
from inferstream.client.progress import ProgressBar
from inferstream.controller.replica import Controller

build_parser().format_help()
check_model_name("efficientnet_lite0")
check_model_name("sim:ms=1")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision", "numpy"))
print(",".join(heavy[:5]))
"""


def test_controller_and_client_commands_do_not_import_torch() -> None:
    """They run no model: torch would cost them about 500 MB of RSS (numpy alone, which only
    `results --format npz` needs, about 20 MB)."""
    proc = subprocess.run([sys.executable, "-c", CONTROLLER_AND_CLIENT], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"torch imported by: {proc.stdout.strip()}"
