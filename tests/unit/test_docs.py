"""The README and docs/ as a reader meets them: the README short, with its two commands and a
link to every page; every link and anchor lands; the reference names every setting, command,
metric, recording rule and alert there is, so adding one without its line fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from inferstream.commands import COMMANDS
from inferstream.config import SECTIONS, Config
from inferstream.controller.metrics import ControllerMetrics
from inferstream.stream.metrics import StreamMetrics
from inferstream.sysinfo.metrics import SysinfoMetrics
from inferstream.worker.metrics import WorkerMetrics

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
DOCUMENTS = [README, REPO / "DEVELOPERS.md", *PAGES]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def text(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    prose = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(line.lstrip("#")) for line in prose.splitlines() if line.startswith("#")}


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    readme = README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    quickstart = readme.split("## Quickstart", 1)[1].split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in quickstart.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_the_readme_links_every_page() -> None:
    linked = {target.split("#")[0] for target in _LINK.findall(README.read_text("utf-8"))}
    wanted = {f"docs/{page.name}" for page in PAGES} | {"BENCHMARKS.md", "DEVELOPERS.md"}
    assert wanted <= linked, f"not linked from the README: {sorted(wanted - linked)}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_link_lands_on_a_file_and_heading(document: Path) -> None:
    prose = _FENCE.sub("", document.read_text(encoding="utf-8"))
    for target in _LINK.findall(prose):
        if target.startswith(("http://", "https://")):
            continue
        path, _, fragment = target.partition("#")
        landing = (document.parent / path).resolve() if path else document
        assert landing.exists(), f"{target}: no such file"
        if fragment and landing.suffix == ".md":
            assert fragment in anchors(landing), f"{target}: no such heading"


def test_the_configuration_page_names_every_setting() -> None:
    page = text("docs/configuration.md")
    for row in _settings():
        assert row in page, f"docs/configuration.md lacks {row}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_table_row_is_in_a_table(document: Path) -> None:
    """A row after a blank line starts a table only with a header and its `|---|` line below
    it; else the rows show as one paragraph of pipes (a blank line inside a table did that)."""
    lines = _FENCE.sub("", document.read_text(encoding="utf-8")).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            below = lines[i + 1] if i + 1 < len(lines) else ""
            assert re.fullmatch(r"\|[-:| ]+\|", below), f"a row outside a table: {line[:80]}"


def _settings() -> dict[str, Any]:
    """Each setting's row start on docs/configuration.md (key, flag, variable), to its
    default."""
    rows: dict[str, Any] = {}
    for section, cls in (("", Config), *SECTIONS.items()):
        for field in dataclasses.fields(cls):
            if field.name in SECTIONS:
                continue
            flag = field.metadata.get("flag") or "--" + field.name.replace("_", "-")
            env = f"INFERSTREAM_{section.upper() + '_' if section else ''}{field.name.upper()}"
            rows[f"| `{field.name}` | `{flag}` | `{env}` |"] = field.default
    return rows


def _shown(default: Any) -> str:
    """A default as the page's column writes it: a list's items, none, empty, on and off."""
    if isinstance(default, tuple):
        return ", ".join(default) or "none"
    if default is None or default == "" or isinstance(default, bool):
        return {None: "none", "": "empty", True: "on", False: "off"}[default]
    return str(default)


def test_the_configuration_page_gives_each_setting_its_default_and_no_other_setting() -> None:
    """The default column says what the code starts with (a note after it in brackets), and a
    row names a setting there is: a default changed or a setting renamed fails here."""
    settings = _settings()
    for line in text("docs/configuration.md").splitlines():
        cells = line.split(" | ")
        if len(cells) < 5 or not line.startswith("| `") or "INFERSTREAM_" not in cells[2]:
            continue
        start = " | ".join(cells[:3]) + " |"
        assert start in settings, f"docs/configuration.md names no setting there is: {start}"
        written = cells[3].split(" (")[0]
        assert written == _shown(settings[start]), f"{start} default {written!r}"


def test_the_cli_page_names_every_command() -> None:
    page = text("docs/cli.md")
    for name in COMMANDS:
        assert f"`{name}" in page.split("## Exit codes")[0], f"docs/cli.md lacks {name}"


def test_the_metrics_page_names_every_metric_rule_and_alert() -> None:
    page = text("docs/metrics.md")
    names: set[str] = set()
    for bundle in (WorkerMetrics, StreamMetrics, ControllerMetrics, SysinfoMetrics):
        for family in bundle(CollectorRegistry()).registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    rules = text("ops/prometheus/rules.yml")
    names |= set(re.findall(r"- (?:record|alert): (\S+)", rules))
    missing = sorted(name for name in names if f"`{name}`" not in page)
    assert not missing, f"docs/metrics.md lacks {missing}"
