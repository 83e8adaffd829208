"""The `inferstream` command's garbage collector thresholds (`inferstream.garbage`)."""

from __future__ import annotations

import atexit
import gc
import sys

import pytest

from inferstream.cli import main
from inferstream.garbage import YOUNG_THRESHOLD, spare_the_teardown


def test_the_command_collects_the_youngest_generation_less_often_than_cpython() -> None:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with pytest.raises(SystemExit):
            main(["--version"])
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    finally:
        gc.set_threshold(*before)
    assert YOUNG_THRESHOLD > 700


def test_the_program_spares_its_teardown_a_collection_and_a_call_from_python_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(atexit, "register", registered.append)
    monkeypatch.setattr(sys, "argv", ["inferstream", "--version"])
    before = gc.get_threshold()
    try:
        with pytest.raises(SystemExit):
            main(["--version"])  # a call from Python: its process goes on
        assert registered == []
        with pytest.raises(SystemExit):
            main()  # the program: it ends with this
        assert registered == [spare_the_teardown]
    finally:
        gc.set_threshold(*before)


def test_what_is_alive_at_the_end_is_left_out_of_the_teardown_s_collections() -> None:
    alive = [[i] for i in range(1_000)]
    try:
        spare_the_teardown()
        assert gc.get_freeze_count() >= len(alive)
    finally:
        gc.unfreeze()
