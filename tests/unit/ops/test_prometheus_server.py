"""`tests.prometheus.PrometheusServer` refuses what Prometheus itself would take without a
word; that a real Prometheus scrapes a target and evaluates the project's rules through it is
tests/integration/test_prometheus_server.py (Prometheus takes about 5 s to scrape)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.prometheus import PrometheusError, PrometheusServer


def test_a_missing_rule_file_is_refused_before_prometheus_starts(tmp_path: Path) -> None:
    # Prometheus itself reads rule_files as globs and would load nothing without a word.
    server = PrometheusServer([], tmp_path, rule_files=[tmp_path / "rules.yml"],
                              binary="/nonexistent/prometheus")
    with pytest.raises(PrometheusError, match="no rule file"):
        server.start()
