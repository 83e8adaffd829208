"""The Prometheus rules, example scrape config and Grafana dashboard under ops/ are valid, the
rules behave as their promtool tests say, and they name only metric families the roles export:
renaming a metric fails here until the rules and dashboard follow."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from inferstream.controller.metrics import ControllerMetrics
from inferstream.stream.metrics import StreamMetrics
from inferstream.sysinfo.metrics import SysinfoMetrics
from inferstream.worker.metrics import WorkerMetrics
from tests.unit.prometheus_binaries import REPO, RULES, require

PROMETHEUS = REPO / "ops" / "prometheus"
RULES_TEST = PROMETHEUS / "rules_test.yml"
DASHBOARD = REPO / "ops" / "grafana" / "dashboards" / "inferstream.json"

def exported_series() -> set[str]:
    """Every series name the roles' metric bundles can export (histograms with their
    _bucket, _sum and _count), from the bundles themselves: prometheus_client's registry
    keeps each collector's names in `_names_to_collectors`."""
    series: set[str] = set()
    # one registry each: the worker's and the stream's bundles share the data path's families
    for bundle in (WorkerMetrics, StreamMetrics, ControllerMetrics, SysinfoMetrics):
        registry = CollectorRegistry()
        bundle(registry)
        series |= set(registry._names_to_collectors)
    return series


SERIES = exported_series()

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = re.compile(r"(?<![\w:])inferstream[_:][\w:]*")
_RECORD = re.compile(r"^\s*- record:\s*(\S+)\s*$", re.MULTILINE)
_ALERT = re.compile(r"^\s*- alert:\s*(\w+)\s*$", re.MULTILINE)
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
# What a Grafana variable stands for when the expression is checked on its own.
_VARIABLE_VALUES = {"pool": "gpu", "__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


def promtool(*args: str) -> str:
    done = subprocess.run([require("promtool"), *args], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def metric_names(promql: str) -> set[str]:
    """inferstream_* and inferstream:* names in PromQL or rules text, string literals ignored."""
    return set(_NAME.findall(_STRING.sub('""', promql)))


def rules_text() -> str:
    """rules.yml without its comments (they may mention anything)."""
    return "\n".join(line for line in RULES.read_text().splitlines()
                     if not line.lstrip().startswith("#"))


def recorded_names() -> set[str]:
    return set(_RECORD.findall(rules_text()))


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def dashboard_exprs() -> list[tuple[str, str]]:
    """(panel title, expr) of every query target, and the template variables' queries."""
    board = dashboard()
    exprs = [(panel["title"], target["expr"]) for panel in panels(board)
             for target in panel.get("targets", [])]
    return exprs + [(f"${variable['name']}", variable["query"]["query"])
                    for variable in board["templating"]["list"]]


def concrete(expr: str) -> str:
    """`expr` with Grafana's variables replaced by values PromQL can parse."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in _VARIABLE_VALUES, f"unknown dashboard variable ${name} in {expr}"
        return _VARIABLE_VALUES[name]
    return _VARIABLE.sub(value, expr)


def test_rules_are_valid() -> None:
    promtool("check", "rules", str(RULES))


def test_rules_behave_as_their_unit_tests_say() -> None:
    promtool("test", "rules", str(RULES_TEST))


def test_example_scrape_config_is_valid_and_loads_the_rules() -> None:
    out = promtool("check", "config", str(PROMETHEUS / "prometheus.yml"))
    assert "1 rule files found" in out


def test_every_alert_is_labelled_annotated_and_tested_firing_and_quiet() -> None:
    text = rules_text()
    alerts = _ALERT.findall(text)
    assert alerts
    for block in text.split("- alert:")[1:]:
        name = block.split()[0]
        for field in ("severity:", "summary:", "description:"):
            assert field in block, f"alert {name} has no {field}"
    cases = re.findall(r"alertname:\s*(\w+)\s*\n\s*exp_alerts:(.*)", RULES_TEST.read_text())
    firing = {name for name, rest in cases if rest.strip() != "[]"}
    quiet = {name for name, rest in cases if rest.strip() == "[]"}
    assert set(alerts) - firing == set(), "alerts without a case where they fire"
    assert set(alerts) - quiet == set(), "alerts without a case where they stay quiet"


def test_rules_name_only_exported_metrics() -> None:
    recorded = recorded_names()
    assert {"inferstream:pool_items_per_second:rate1m", "inferstream:job_progress:ratio",
            "inferstream:worker_items_per_second:rate1m"} <= recorded
    unknown = metric_names(rules_text()) - SERIES - recorded
    assert unknown == set(), f"rules.yml names metrics no role exports: {sorted(unknown)}"


def test_dashboard_names_only_exported_metrics() -> None:
    used = set().union(*(metric_names(expr) for _, expr in dashboard_exprs()))
    unknown = used - SERIES - recorded_names()
    assert unknown == set(), f"the dashboard queries metrics no role exports: {sorted(unknown)}"


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Each query, variables substituted, as a recording rule that `promtool check rules` parses."""
    queries = [(title, expr) for title, expr in dashboard_exprs()
               if not expr.startswith("label_values(")]  # Grafana's, not PromQL
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, (_, expr) in enumerate(queries):
        lines += [f"      - record: dashboard:query_{number}",
                  f"        expr: {json.dumps(concrete(expr))}"]
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    listing = "\n".join(f"dashboard:query_{n} ({title}): {expr}"
                        for n, (title, expr) in enumerate(queries))
    done = subprocess.run([require("promtool"), "check", "rules", str(rules)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{listing}"


def test_dashboard_queries_the_prometheus_datasource() -> None:
    board = dashboard()
    assert 36 <= board["schemaVersion"] <= 41
    for panel in panels(board):
        for target in panel.get("targets", []):
            assert panel["datasource"] == target["datasource"] == {
                "type": "prometheus", "uid": "prometheus"}, panel["title"]


def test_dashboard_filters_by_pool() -> None:
    variables = {variable["name"]: variable for variable in dashboard()["templating"]["list"]}
    assert variables["pool"]["type"] == "query"
    assert len([expr for _, expr in dashboard_exprs() if '"$pool"' in expr]) >= 5
