"""`promtool check metrics` on an exposition: Prometheus' own linter (names, units, _total
counters, help text); and one sample of a registry, for the tests of the metric bundles."""

from __future__ import annotations

import subprocess

from prometheus_client import CollectorRegistry

from tests.unit.prometheus_binaries import require


def check_metrics(exposition: bytes) -> None:
    """The exposition passes `promtool check metrics` with no lint problem."""
    done = subprocess.run([require("promtool"), "check", "metrics"], input=exposition,
                          capture_output=True, timeout=60, check=False)
    problems = (done.stdout + done.stderr).decode(errors="replace").strip()
    assert done.returncode == 0 and not problems, problems


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The value of sample `name` with exactly `labels`; fails when there is none."""
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name} {labels}"
    return found
