"""A user's mistake in a setting, whichever way it comes (a flag, INFERSTREAM_*, the TOML
file), is one line on stderr and exit 2: never a traceback, never a value quietly changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.cli import main


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("inferstream: error: ")
    return lines[0]


@pytest.mark.parametrize("argv", [["config", "show"], ["worker", "--model", "sim:ms=1"]])
@pytest.mark.parametrize("by_env", [False, True])
def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(
        tmp_path: Path, argv: list[str], by_env: bool, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xff\xfe")
    if by_env:
        monkeypatch.setenv("INFERSTREAM_CONFIG", str(path))
    assert main([*argv, *([] if by_env else ["--config", str(path)])]) == 2
    assert f"config file {path} is not UTF-8" in one_line_error(capsys)


@pytest.mark.parametrize(("line", "shown"), [("[worker]\nmax_batch = 3.5", "worker.max_batch"),
                                             ("[worker]\nmetrics_port = 1e3",
                                              "worker.metrics_port"),
                                             ("partitions = 12.0", "partitions")])
def test_a_toml_float_for_an_integer_setting_is_refused_as_the_flag_is(
        tmp_path: Path, line: str, shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(line + "\n")
    assert main(["config", "show", "--config", str(path)]) == 2
    assert f"{shown} must be an integer, got " in one_line_error(capsys)
    path.write_text(line.split("=")[0] + "= 3\n")  # a TOML integer is fine
    assert main(["config", "show", "--config", str(path)]) == 0
