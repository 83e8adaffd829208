"""The configuration tests run with none of the developer's INFERSTREAM_* settings."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main()` reads os.environ: keep the developer's INFERSTREAM_* settings out of the tests."""
    for name in list(os.environ):
        if name.startswith("INFERSTREAM_"):
            monkeypatch.delenv(name)
