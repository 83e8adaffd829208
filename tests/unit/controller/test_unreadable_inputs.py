"""A job's input that cannot be read to its end fails the job with the reason, never the
controller: a list file that is not UTF-8 text (a UnicodeDecodeError out of the controller's
round, every job waiting on the restarts), one deleted after the job was accepted. The count
ahead of the cutting stops there too and reports no total rather than a part of one."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.controller import backlog as backlog_module
from inferstream.schemas.records import JobEventType, now_ms
from tests.unit.controller.test_backlog import figures, paced
from tests.unit.controller.test_book import (
    MakeBook,
    accepted,
    events,
    make_config,
    make_job,
)


def names(path: Path, prefix: str, count: int) -> str:
    path.write_text("".join(f"{prefix}-{n}.jpg\n" for n in range(count)))
    return f"@{path}"


def test_a_list_that_is_not_utf8_rejects_the_job_with_the_reason(
        make_book: MakeBook, tmp_path: Path) -> None:
    listed = tmp_path / "latin1.txt"
    listed.write_bytes("photo-1.jpg\nété.jpg\n".encode("latin-1"))
    book = make_book(paced(backlog_item_s=0.01))
    out, issued = accepted(book, make_job(items=0, chunk_size=10, inputs=[f"@{listed}"]))

    (rejected,) = events(book, out)
    assert rejected["type"] == JobEventType.REJECTED and issued == []
    assert rejected["reason"] == (f"its input cannot be read to its end: list file {listed} "
                                  "is not UTF-8 text (invalid continuation byte)")


def test_a_list_gone_after_acceptance_fails_the_job_and_gives_no_partial_total(
        make_book: MakeBook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backlog_module, "COUNT_STEP", 400)
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    book = make_book(make_config(tasks_per_round=10))  # unpaced: 10 tasks a round
    accepted(book, make_job(items=0, chunk_size=10, inputs=[
        names(first, "a", 1000), names(second, "b", 1000)]))
    state = book.jobs[next(iter(book.jobs))]
    second.unlink()  # deleted, or an NFS error, once the job runs
    for _ in range(6):
        figures(book)
    assert state.total_items is None  # not 1000, nor the 800 counted before the error

    out = book.outbox()
    for _ in range(30):  # the rounds cut the job's tasks until they meet the error
        book.tick(out, now_ms())
        if state.failure is not None:
            break
    (failed,) = [e for e in events(book, out) if e["type"] == JobEventType.FAILED]
    assert failed["reason"] == f"its input cannot be read to its end: No such file or " \
                               f"directory: {second}"
