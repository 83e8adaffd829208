"""Partial output files: a writer killed with SIGKILL leaves its `PATH.tmp-HOST-PID` (and an
npz writer its spool folder); the next writer of the path removes those of processes gone,
and leaves alone those of processes running and of other hosts."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from inferstream.jobs.npz import write_npz
from inferstream.jobs.output import replacing
from inferstream.jobs.partial import partial_path
from tests.unit.support.processes import gone_pid


def test_a_killed_writers_partial_file_is_removed_by_the_next_writer(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    host = socket.gethostname()
    dead = tmp_path / f"out.jsonl.tmp-{host}-{gone_pid()}"
    alive = tmp_path / f"out.jsonl.tmp-{host}-{os.getppid()}"
    elsewhere = tmp_path / f"out.jsonl.tmp-not-{host}-{gone_pid()}"
    other_path = tmp_path / f"other.jsonl.tmp-{host}-{gone_pid()}"
    for leftover in (dead, alive, elsewhere, other_path):
        leftover.write_text("{}\n")
    with replacing(str(out)) as handle:
        handle.write("{}\n")
    assert out.read_text() == "{}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.jsonl", alive.name, elsewhere.name, other_path.name])


def test_a_path_with_glob_characters_is_matched_literally(tmp_path: Path) -> None:
    host = socket.gethostname()
    dead = tmp_path / f"run[1].jsonl.tmp-{host}-{gone_pid()}"
    lookalike = tmp_path / f"run1.jsonl.tmp-{host}-{gone_pid()}"
    dead.write_text("")
    lookalike.write_text("")
    assert partial_path(str(tmp_path / "run[1].jsonl")).endswith(f".tmp-{host}-{os.getpid()}")
    assert [p.name for p in tmp_path.iterdir()] == [lookalike.name]


def test_a_killed_npz_writers_spool_folder_is_removed_by_the_next_one(tmp_path: Path) -> None:
    spool = tmp_path / f".inferstream-npz-{socket.gethostname()}-{gone_pid()}-x1y2"
    spool.mkdir()
    (spool / "column.bin").write_bytes(b"\0" * 64)
    written = write_npz([], str(tmp_path / "out.npz"))
    assert written.rows == 0
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]
