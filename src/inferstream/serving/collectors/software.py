"""The software collector: versions that matter to scheduling, and the models served."""

from __future__ import annotations

import platform
import sys
from typing import Any

from inferstream import __version__
from inferstream.schemas.records import SoftwareFields
from inferstream.serving.collectors.base import SampleContext

#: Key prefix of a served model's version in `software` (`model:resnet50`).
MODEL_KEY = "model:"


class SoftwareCollector:
    """`software`: inferstream, python, torch and CUDA versions (torch and CUDA only where
    the process has torch loaded, and CUDA only where torch was built with it), plus
    `model:<name>` for each served model with its weights version."""

    name = "software"

    def __init__(self) -> None:
        self._base = _versions()

    def collect(self, context: SampleContext) -> SoftwareFields:
        software = dict(self._base)
        for model in context.served:
            software[MODEL_KEY + model.name] = model.version or "unknown"
        return SoftwareFields(software=software)


def _versions() -> dict[str, str]:
    versions = {"inferstream": __version__, "python": platform.python_version()}
    torch: Any = sys.modules.get("torch")
    if torch is not None:
        versions["torch"] = str(torch.__version__)
        if torch.version.cuda:
            versions["cuda"] = str(torch.version.cuda)
    return versions
