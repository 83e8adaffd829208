"""What a container of a rendered deployment sees, and the inferstream Config it builds.

`container_config` lays the container's ConfigMap and Secret volumes out under a folder (a
Secret's keys as placeholder files: the values live in the cluster only), sets the environment
the kubelet would give it (envFrom, then env; a path under a mount points into the folder) and
parses its args with the real `inferstream` parser, as the image's ENTRYPOINT would.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from inferstream.cli import build_parser, config_from_args
from inferstream.config import Config
from tests.unit.deploy.kustomize import Resource

#: What the downward API gives the pod's fields the manifests read.
FIELD_VALUES = {"status.podIP": "10.0.0.7"}


@dataclass(frozen=True)
class Workload:
    """A Deployment's or Job's pod template, its first container and the deployment around."""

    resource: Resource
    everything: list[Resource]

    @property
    def name(self) -> str:
        return str(self.resource["metadata"]["name"])

    @property
    def pod(self) -> dict[str, Any]:
        return dict(self.resource["spec"]["template"]["spec"])

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1, f"{self.name}: one container per pod"
        return dict(containers[0])

    def config_map(self, name: str) -> dict[str, str]:
        found = [r for r in self.everything if r["kind"] == "ConfigMap"
                 and r["metadata"]["name"] == name]
        assert found, f"{self.name} uses ConfigMap {name}, which the deployment lacks"
        return dict(found[0].get("data", {}))

    def volume(self, name: str) -> dict[str, Any]:
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        assert name in volumes, f"{self.name} mounts volume {name}, which the pod lacks"
        return dict(volumes[name])


def workloads(resources: list[Resource]) -> list[Workload]:
    """Every Deployment and Job of `resources`."""
    return [Workload(r, resources) for r in resources if r["kind"] in ("Deployment", "Job")]


def lay_out(workload: Workload, root: Path) -> list[str]:
    """Write the container's ConfigMap and Secret mounts under `root`; their mount paths."""
    mounts = []
    for mount in workload.container.get("volumeMounts", []):
        folder = root / mount["mountPath"].lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        for path, text in _files(workload, workload.volume(mount["name"])).items():
            (folder / path).write_text(text)
        mounts.append(mount["mountPath"])
    return mounts


def _files(workload: Workload, volume: dict[str, Any]) -> dict[str, str]:
    """The files a volume holds: a ConfigMap's data, a Secret's items (placeholders)."""
    if "configMap" in volume:
        return workload.config_map(volume["configMap"]["name"])
    if "secret" in volume:
        return _secret_files(volume["secret"])
    if "projected" in volume:
        found: dict[str, str] = {}
        for source in volume["projected"]["sources"]:
            assert set(source) == {"secret"}, f"{workload.name}: only Secrets are projected"
            found.update(_secret_files(source["secret"]))
        return found
    assert "emptyDir" in volume, f"{workload.name}: volume {volume['name']} is of no known kind"
    return {}


def _secret_files(secret: dict[str, Any]) -> dict[str, str]:
    # items name the keys: without them the test could not know which files the pod gets
    assert secret.get("items"), f"Secret {secret['name']}: list its keys as items"
    return {item["path"]: f"placeholder for {secret['name']}/{item['key']}"
            for item in secret["items"]}


def environment(workload: Workload, root: Path, mounts: list[str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it, paths under `root`."""
    env: dict[str, str] = {}
    for source in workload.container.get("envFrom", []):
        env.update(workload.config_map(source["configMapRef"]["name"]))
    for variable in workload.container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = FIELD_VALUES[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return {name: _under(value, root, mounts) for name, value in env.items()}


def _under(value: str, root: Path, mounts: list[str]) -> str:
    if any(value.startswith(mount.rstrip("/") + "/") for mount in mounts):
        return str(root / value.lstrip("/"))
    return value


@contextmanager
def container_environment(workload: Workload, root: Path,
                          monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The container's files under `root` and its environment in os.environ."""
    env = environment(workload, root, lay_out(workload, root))
    with monkeypatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("INFERSTREAM_")]:
            patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        yield env


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The real `inferstream` parser, built once (15 ms a build, for ~100 containers): it
    holds no state between parses and no default from the environment."""
    return build_parser()


def container_config(workload: Workload, root: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[str, Config]:
    """The container's inferstream command and the Config it starts with."""
    args = workload.container["args"]
    with container_environment(workload, root, monkeypatch):
        try:
            parsed = parser().parse_args(args)
        except SystemExit as exc:
            raise AssertionError(f"{workload.name}: inferstream rejects {args}") from exc
        return str(parsed.command), config_from_args(parsed)
