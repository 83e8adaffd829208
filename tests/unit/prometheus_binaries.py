"""Debian's `prometheus` package binaries for the tests: fail in CI without them, else skip."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "ops" / "prometheus" / "rules.yml"


def require(binary: str) -> str:
    """The path of `binary`; fails the test where CI is set, skips it elsewhere."""
    path = shutil.which(binary)
    if path is None:
        reason = f"{binary} is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return path
