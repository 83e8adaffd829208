"""Fixtures of the ops tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MAKE_SECRETS = Path(__file__).resolve().parents[3] / "ops" / "compose" / "make_secrets.py"


@pytest.fixture(scope="session")
def compose_secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `ops/compose/make_secrets.py` makes for docker-compose.yml and its secured
    variant, in a folder of the tests' own."""
    folder = tmp_path_factory.mktemp("compose") / "secrets"
    made = subprocess.run([sys.executable, str(MAKE_SECRETS), "--dir", str(folder)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    return folder
