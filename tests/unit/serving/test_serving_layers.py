"""The serving core lies below the two roles that share it: `serving/` imports neither
`worker/` nor `stream/`, and those two do not import each other (imports read with ast,
those inside functions and under TYPE_CHECKING included)."""

from __future__ import annotations

import ast
from pathlib import Path

import inferstream

PACKAGE = Path(inferstream.__file__).parent


def imported_by(package: str) -> dict[str, set[str]]:
    """The inferstream modules each module of `package` imports, by file."""
    found: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)  # and `from inferstream import worker`:
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        found[str(path.relative_to(PACKAGE))] = {n for n in names if n.startswith("inferstream")}
    return found


def importing(package: str, *roles: str) -> dict[str, set[str]]:
    """The modules of `package` that import one of `roles`, with what they import of it."""
    homes = {f"inferstream.{role}" for role in roles}
    return {path: bad for path, names in imported_by(package).items()
            if (bad := {n for n in names
                        if n in homes or any(n.startswith(f"{home}.") for home in homes)})}


def test_serving_imports_neither_role_it_serves() -> None:
    assert importing("serving", "worker", "stream") == {}


def test_the_worker_and_the_stream_do_not_import_each_other() -> None:
    assert importing("worker", "stream") == {}
    assert importing("stream", "worker") == {}
