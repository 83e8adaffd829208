"""The `inferstream` command's garbage collector thresholds (`inferstream.garbage`)."""

from __future__ import annotations

import gc

import pytest

from inferstream.cli import main
from inferstream.garbage import YOUNG_THRESHOLD


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
