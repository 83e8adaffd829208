"""The policy and the records sit below the roles, and the sysinfo role imports no other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import inferstream

PACKAGE = Path(inferstream.__file__).parent
ROLES = ("client", "controller", "stream", "sysinfo", "worker")


def imported(package: str) -> set[str]:
    """Every inferstream package that a module of `package` imports, anywhere in it."""
    found = set()
    for path in (PACKAGE / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found |= {n.split(".")[1] for n in names
                      if n.startswith("inferstream.") and n.count(".") >= 1}
    return found


@pytest.mark.parametrize(("package", "allowed_roles"), [
    ("schemas", ()), ("policy", ()), ("sysinfo", ("sysinfo",))])
def test_a_layer_imports_no_role_and_a_role_no_other(package: str,
                                                     allowed_roles: tuple[str, ...]) -> None:
    roles = {p for p in imported(package) if p in ROLES}
    assert roles <= set(allowed_roles), f"{package} imports {sorted(roles - set(allowed_roles))}"
