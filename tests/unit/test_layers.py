"""Each role imports only what it needs: the controller and the client run no model, so
they never load torch (about 500 MB of RSS in a process that does not use it)."""

from __future__ import annotations

import subprocess
import sys

CONTROLLER_AND_CLIENT = """
import sys
from inferstream.cli import build_parser
from inferstream.client import commands as client
from inferstream.controller import run as controller
from inferstream.models import check_model_name, known_models
from inferstream.client.client import Client
from inferstream.client.listing import recent_jobs
from inferstream.client.progress import ProgressBar
from inferstream.controller.replica import Controller

build_parser().format_help()
check_model_name("efficientnet_lite0")
check_model_name("sim:ms=1")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision"))
print(",".join(heavy[:5]))
"""


def test_controller_and_client_commands_do_not_import_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", CONTROLLER_AND_CLIENT], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"torch imported by: {proc.stdout.strip()}"
