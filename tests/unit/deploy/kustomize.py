"""The kustomize that deploy/k8s needs, in Python: the tests see what `kubectl apply -k`
applies without kustomize (a Go binary) in CI.

It knows `resources` (manifest files, and folders with a kustomization.yaml of their own) and
`patches` of JSON 6902 operations (add, replace, remove) on one resource named by kind and
name. A kustomization or patch using anything else is refused, so that nothing this renderer
would ignore can pass a test.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]

KUSTOMIZATION = "kustomization.yaml"
_KEYS = {"apiVersion", "kind", "resources", "patches"}
_PATCH_KEYS = {"path", "target"}
_TARGET_KEYS = {"kind", "name"}


class KustomizeError(Exception):
    """A kustomization this renderer cannot render as kustomize would."""


def render(folder: Path) -> list[Resource]:
    """The resources `kubectl apply -k folder` applies, in the order the files list them."""
    spec = yaml.safe_load((folder / KUSTOMIZATION).read_text())
    _only(spec, _KEYS, folder / KUSTOMIZATION)
    resources: list[Resource] = []
    for entry in spec.get("resources", []):
        path = folder / entry
        if path.is_dir():
            resources += render(path)
        else:
            resources += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    names = [identity(r) for r in resources]
    if doubled := sorted({n for n in names if names.count(n) > 1}):
        raise KustomizeError(f"{folder}: resources defined twice: {doubled}")
    for patch in spec.get("patches", []):
        _only(patch, _PATCH_KEYS, folder / KUSTOMIZATION)
        _only(patch["target"], _TARGET_KEYS, folder / KUSTOMIZATION)
        target = (patch["target"]["kind"], patch["target"]["name"])
        if target not in names:
            raise KustomizeError(f"{folder}: patch {patch['path']} targets no resource {target}")
        at = names.index(target)
        operations = yaml.safe_load((folder / patch["path"]).read_text())
        resources[at] = apply_json_patch(resources[at], operations)
    return resources


def identity(resource: Resource) -> tuple[str, str]:
    """(kind, name): what kustomize tells resources apart by in one namespace."""
    return resource["kind"], resource["metadata"]["name"]


def apply_json_patch(document: Resource, operations: list[dict[str, Any]]) -> Resource:
    """`document` with the RFC 6902 `operations` applied (add, replace, remove)."""
    patched = copy.deepcopy(document)
    for operation in operations:
        op, pointer = operation["op"], operation["path"]
        parent, key = _parent(patched, pointer)
        if isinstance(parent, list):
            _on_list(parent, key, op, operation.get("value"), pointer)
        elif op == "add":
            parent[key] = operation["value"]
        elif key not in parent:
            raise KustomizeError(f"{op} {pointer}: no such member")
        elif op == "replace":
            parent[key] = operation["value"]
        elif op == "remove":
            del parent[key]
        else:
            raise KustomizeError(f"operation {op!r} at {pointer} is not supported")
    return patched


def _on_list(items: list[Any], key: str, op: str, value: Any, pointer: str) -> None:
    at = len(items) if key == "-" and op == "add" else _index(key, pointer)
    if at > len(items) or (op != "add" and at == len(items)):
        raise KustomizeError(f"{op} {pointer}: index out of range")
    if op == "add":
        items.insert(at, value)
    elif op == "replace":
        items[at] = value
    elif op == "remove":
        del items[at]
    else:
        raise KustomizeError(f"operation {op!r} at {pointer} is not supported")


def _parent(document: Any, pointer: str) -> tuple[Any, str]:
    """The container of what `pointer` names, and its last reference token."""
    if not pointer.startswith("/"):
        raise KustomizeError(f"{pointer!r} is not a JSON pointer")
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    node = document
    for token in tokens[:-1]:
        try:
            node = node[_index(token, pointer)] if isinstance(node, list) else node[token]
        except (KeyError, IndexError, TypeError) as exc:
            raise KustomizeError(f"{pointer}: no {token!r} on the way") from exc
    return node, tokens[-1]


def _index(token: str, pointer: str) -> int:
    if not token.isdigit():
        raise KustomizeError(f"{pointer}: {token!r} is not a list index")
    return int(token)


def _only(mapping: dict[str, Any], known: set[str], where: Path) -> None:
    if unknown := sorted(set(mapping) - known):
        raise KustomizeError(f"{where}: {unknown} not supported by this renderer (only "
                             f"{sorted(known)})")
