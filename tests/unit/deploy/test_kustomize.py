"""The test's kustomize renders what kustomize would, and refuses what it cannot render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.kustomize import KustomizeError, apply_json_patch, render

POD = {"kind": "Deployment", "metadata": {"name": "w"},
       "spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}}


def write(folder: Path, files: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_text(yaml.safe_dump_all(content) if isinstance(content, tuple)
                                   else yaml.safe_dump(content))
    return folder


def test_add_replace_and_remove_as_rfc_6902_says() -> None:
    patched = apply_json_patch(POD, [
        {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "Y"}},
        {"op": "add", "path": "/spec/containers/0/env/0", "value": {"name": "W"}},
        {"op": "add", "path": "/spec/containers/0/envFrom", "value": []},
        {"op": "replace", "path": "/metadata/name", "value": "v"},
        {"op": "remove", "path": "/spec/containers/0/env/1"},
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/a~1b~0c", "value": "d"},
    ])
    container = patched["spec"]["containers"][0]
    assert [e["name"] for e in container["env"]] == ["W", "Y"]
    assert container["envFrom"] == []
    assert patched["metadata"] == {"name": "v", "annotations": {"a/b~c": "d"}}
    assert POD["metadata"] == {"name": "w"}  # the original is left as it was


@pytest.mark.parametrize("operation", [
    {"op": "replace", "path": "/metadata/labels", "value": {}},
    {"op": "remove", "path": "/spec/containers/1"},
    {"op": "add", "path": "/spec/containers/5", "value": {}},
    {"op": "add", "path": "/spec/missing/x", "value": 1},
    {"op": "add", "path": "/spec/containers/first", "value": 1},
    {"op": "move", "from": "/metadata", "path": "/meta"},
    {"op": "add", "path": "metadata", "value": 1},
])
def test_an_operation_that_cannot_apply_is_refused(operation: dict[str, Any]) -> None:
    with pytest.raises(KustomizeError):
        apply_json_patch(POD, [operation])


def test_folders_render_in_order_with_their_patches(tmp_path: Path) -> None:
    config = {"kind": "ConfigMap", "metadata": {"name": "c"}}
    write(tmp_path / "base", {"kustomization.yaml": {"resources": ["pods.yaml"]},
                              "pods.yaml": (POD, config)})
    overlay = write(tmp_path / "overlay", {
        "kustomization.yaml": {"resources": ["../base", "extra.yaml"], "patches": [
            {"path": "name.yaml", "target": {"kind": "Deployment", "name": "w"}}]},
        "extra.yaml": {"kind": "Service", "metadata": {"name": "s"}},
        "name.yaml": [{"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}]})
    resources = render(overlay)
    assert [r["kind"] for r in resources] == ["Deployment", "ConfigMap", "Service"]
    assert resources[0]["metadata"]["labels"] == {"k": "v"}


@pytest.mark.parametrize("kustomization", [
    {"resources": ["pods.yaml"], "namePrefix": "x-"},
    {"resources": ["pods.yaml"], "patches": [
        {"path": "p.yaml", "target": {"kind": "Deployment", "name": "nobody"}}]},
    {"resources": ["pods.yaml"], "patches": [
        {"path": "p.yaml", "target": {"kind": "Deployment", "labelSelector": "a=b"}}]},
    {"resources": ["pods.yaml", "pods.yaml"]},
])
def test_what_it_cannot_render_as_kustomize_would_is_refused(
        tmp_path: Path, kustomization: dict[str, Any]) -> None:
    folder = write(tmp_path, {"kustomization.yaml": kustomization, "pods.yaml": POD,
                              "p.yaml": []})
    with pytest.raises(KustomizeError):
        render(folder)
