"""`promtool check metrics` on an exposition: Prometheus' own linter (names, units, _total
counters, help text). Debian's `prometheus` package has it; `.ci/run` installs it, so under CI
its absence fails the test, elsewhere it skips."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def check_metrics(exposition: bytes) -> None:
    """The exposition passes `promtool check metrics` with no lint problem."""
    done = subprocess.run([promtool(), "check", "metrics"], input=exposition,
                          capture_output=True, timeout=60, check=False)
    problems = (done.stdout + done.stderr).decode(errors="replace").strip()
    assert done.returncode == 0 and not problems, problems


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The value of sample `name` with exactly `labels`; fails when there is none."""
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name} {labels}"
    return found
