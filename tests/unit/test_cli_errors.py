"""A bad flag is one line and exit 2 for every subcommand, as docs/cli.md promises; `-h`
still prints the whole help."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator

import pytest

from inferstream import repeats
from inferstream.cli import _setup_logging, build_parser, main
from inferstream.commands import COMMANDS


def parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """`parser` and every subcommand's parser below it, with its words (`models check`)."""
    yield parser.prog, parser
    for action in parser._actions:  # argparse keeps its subparsers here only
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers(child)


def one_line_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("inferstream: error: ")
    return err.strip()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_bad_flag_is_one_line_for_every_subcommand(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_exit([name, "--no-such-flag"], capsys)
    assert err.endswith(f"(inferstream {name} --help lists the flags)")


def test_every_parser_below_the_command_says_a_mistake_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    found = dict(parsers(build_parser()))
    assert len(found) > len(COMMANDS)
    for prog in found:
        one_line_exit([*prog.split()[1:], "--no-such-flag"], capsys)


def test_a_bad_value_is_one_line_and_help_is_still_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_exit(["controller", "--max-attempts", "x"], capsys)
    assert "argument --max-attempts: invalid int value: 'x'" in err
    one_line_exit([], capsys)
    with pytest.raises(SystemExit) as exit_:
        main(["controller", "-h"])
    assert exit_.value.code == 0
    assert len(capsys.readouterr().out.splitlines()) > 40


def test_a_flag_is_taken_only_as_spelt_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    """A role's flag given to another is unknown there, not the other's flag of that prefix
    (`controller --model x` was `--model-wait-s x`: "invalid float value"), in every parser."""
    err = one_line_exit(["controller", "--model", "x"], capsys)
    assert "unrecognized arguments: --model x" in err
    assert all(not p.allow_abbrev for _, p in parsers(build_parser()))


@pytest.mark.parametrize(("long_running", "shown"), [(True, logging.ERROR),
                                                      (False, logging.CRITICAL)])
def test_librdkafka_s_lines_are_errors_only_and_none_for_a_short_command(
        long_running: bool, shown: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A role logs librdkafka's errors; a short command (status, results) none, so that one
    broker of three away prints no "FAIL ... Connection refused" above its output."""
    librdkafka = logging.getLogger("inferstream.librdkafka")
    monkeypatch.setattr(librdkafka, "level", librdkafka.level)  # restored after the test
    monkeypatch.setattr(logging.getLogger(), "level", logging.INFO)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # pytest's handlers stay
    monkeypatch.setattr(repeats, "hold_back_repeats", lambda: None)  # as they are
    _setup_logging(logging.INFO, long_running)
    assert librdkafka.level == shown
