"""A misspelled INFERSTREAM_* variable is a one-line warning naming the closest setting's
variable; the project's own variables that are not settings are no warning."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from inferstream.cli import main
from inferstream.config import unknown_variables
from inferstream.config.loading import OTHER_VARIABLES, setting_variables

REPO = Path(__file__).parents[3]


def test_a_misspelled_variable_is_one_warning_naming_the_closest_setting(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSTREAM_WORKER_MAXBATCH", "3")
    with caplog.at_level(logging.WARNING):
        assert main(["config", "show"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["INFERSTREAM_WORKER_MAXBATCH is not an inferstream setting (did you "
                        "mean INFERSTREAM_WORKER_MAX_BATCH?): ignored"]


def test_a_name_like_no_setting_is_warned_of_without_a_guess() -> None:
    assert unknown_variables({"INFERSTREAM_FOO": "1", "OTHER": "x"}) == [
        "INFERSTREAM_FOO is not an inferstream setting: ignored"]


def test_settings_and_the_projects_own_variables_are_no_warning() -> None:
    names = [*setting_variables(), *OTHER_VARIABLES]
    assert unknown_variables(dict.fromkeys(names, "1")) == []


def test_every_inferstream_variable_the_project_uses_is_known() -> None:
    """A new variable of the project's own (ops/, compose, a test hook) goes into
    OTHER_VARIABLES, or every user who sets it is warned."""
    files = [p for root in ("src", "ops", "deploy", "tests", "examples") for p in
             (REPO / root).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".yml",
                                                                      ".yaml", ".md", "")]
    files += [*REPO.glob("docker-compose*.yml"), REPO / "Dockerfile", REPO / "Makefile"]
    used = set()
    for path in set(files) - {Path(__file__)}:  # this file's misspellings are on purpose
        text = path.read_text(errors="replace")
        used |= set(re.findall(r"INFERSTREAM_[A-Z0-9_]*[A-Z0-9]\b", text))
    assert used, "no INFERSTREAM_ variable found: the scan is broken"
    unknown = used - set(setting_variables()) - OTHER_VARIABLES
    assert unknown == set()
