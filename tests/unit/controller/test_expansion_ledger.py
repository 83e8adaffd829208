"""Job expansion, task cutting and the controller's ledger, without a broker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from inferstream.controller.expansion import (
    Item,
    JobExpansion,
    check_inputs,
    cut_tasks,
    iter_items,
)
from inferstream.controller.ledger import JobState, LedgerCodec
from inferstream.jobs.errors import InputError
from inferstream.models.errors import ItemError
from inferstream.models.items import fetch_item
from inferstream.schemas import Codec
from inferstream.schemas.records import LedgerStatus


def job(**fields: Any) -> dict[str, Any]:
    base = {"job_id": "20261202-100000-00000000", "model": "sim:ms=1", "pool": "default",
            "top_k": 5, "chunk_size": 3, "inputs": [], "inline_items": [],
            "submitted_at": 0, "submitter": "", "output_path": None}
    base.update(fields)
    return base


def test_directories_expand_recursively_in_sorted_order(tmp_path: Path) -> None:
    for rel in ("b/2.jpg", "b/1.jpg", "a.jpg", "c/d/e.jpg", ".hidden.jpg"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    names = [i.name for i in iter_items(job(inputs=[str(tmp_path)]))]
    assert names == [str(tmp_path / r) for r in ("a.jpg", "b/1.jpg", "b/2.jpg", "c/d/e.jpg")]


def test_list_files_uris_inline_and_missing_paths_are_all_items(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("http://example.invalid/a.jpg\n\n# a comment\nfile:///x.jpg\n")
    items = list(iter_items(job(
        inputs=[f"@{listing}", str(tmp_path / "missing.jpg")],
        inline_items=[{"name": "inline.jpg", "data": b"\xff\xd8"}],
    )))
    assert [(i.index, i.name, i.data) for i in items] == [
        (0, "inline.jpg", b"\xff\xd8"),
        (1, "http://example.invalid/a.jpg", None),
        (2, "file:///x.jpg", None),
        (3, str(tmp_path / "missing.jpg"), None),
    ]


def test_an_unreadable_directory_rejects_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:  # root ignores permission bits, so refuse like a mount would
        if str(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(InputError, match=r"cannot read directory .*Permission denied"):
        check_inputs(job(inputs=[str(locked)]))


def test_a_missing_list_file_rejects_the_job(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read list file"):
        check_inputs(job(inputs=[f"@{tmp_path / 'nope.txt'}"]))


def test_tasks_are_cut_by_count_and_by_inline_bytes() -> None:
    items = [Item(i, f"n{i}", b"x" * 400) for i in range(7)]
    assert [len(c) for c in cut_tasks(items, chunk_size=3)] == [3, 3, 1]
    assert [len(c) for c in cut_tasks(items, chunk_size=3, bytes_cap=1000)] == [2, 2, 2, 1]
    huge = [Item(0, "big", b"x" * 5000), Item(1, "small", b"")]
    assert [len(c) for c in cut_tasks(huge, chunk_size=8, bytes_cap=1000)] == [1, 1]


def test_a_resumed_expansion_continues_with_the_same_task_ids() -> None:
    spec = job(inputs=[f"item-{i}" for i in range(10)], chunk_size=3)
    whole = JobExpansion(spec).next_tasks(100)
    first = JobExpansion(spec)
    head = first.next_tasks(2)
    resumed = JobExpansion(spec, skip_tasks=2).next_tasks(100)
    flat = [(t, [i.name for i in items]) for t, items in head + resumed]
    assert flat == [(t, [i.name for i in items]) for t, items in whole]
    assert [t for t, _ in whole] == [0, 1, 2, 3]


def test_the_ledger_rebuilds_state_even_when_compaction_reorders_entries() -> None:
    codec = Codec()
    ledger = LedgerCodec(codec)
    state = JobState(job(inputs=["a", "b", "c", "d"], chunk_size=2), partition=3)
    state.issued_tasks, state.issued_items, state.expanded = 2, 4, True
    early_done = ledger.task_entry(state.job_id, 0, LedgerStatus.DONE, ok=2, worker="w1")[1]
    assert state.record_result(0, ok=2, errors=0)
    assert not state.record_result(0, ok=2, errors=0)  # a duplicate is not counted
    assert not state.record_result(7, ok=1, errors=0)  # nor a task never issued
    job_entry = ledger.job_entry(state)[1]
    # Compaction kept the latest JOB entry, which now follows the task entry.
    rebuilt = ledger.rebuild([(early_done, 3), (job_entry, 3)])
    again = rebuilt[state.job_id]
    assert again.done == {0} and again.ok_items == 2 and again.issued_tasks == 2
    assert again.partition == 3 and not again.complete
    assert again.record_result(1, ok=1, errors=1)
    assert again.complete
    again.status = LedgerStatus.COMPLETED
    assert not again.complete


def test_counts_are_rebuilt_from_done_entries_written_after_the_last_job_entry() -> None:
    """Issue 9.2: a JOB entry is written less often than DONE entries; a replica that takes
    over must not take its stale counts (it did: COMPLETED 2872/3000 for a 3,000-line output)."""
    codec = Codec()
    ledger = LedgerCodec(codec)
    state = JobState(job(inputs=[f"i{n}" for n in range(6)], chunk_size=2), partition=0)
    state.issued_tasks, state.issued_items, state.expanded = 3, 6, True
    records = [(ledger.job_entry(state)[1], 0)]  # written before any result
    for task_id, (ok, errors) in enumerate([(2, 0), (1, 1)]):
        assert state.record_result(task_id, ok, errors)
        records.append((ledger.task_entry(state.job_id, task_id, LedgerStatus.DONE, ok=ok,
                                          errors=errors)[1], 0))
    again = ledger.rebuild(records)[state.job_id]
    assert (again.done, again.ok_items, again.error_items) == ({0, 1}, 3, 1)


def test_a_folder_linked_into_itself_expands_each_real_folder_once(tmp_path: Path) -> None:
    """The walk followed `a/up -> ..` until "Too many levels of symbolic links", failing the
    whole job; an inline submission of the same folder took each real folder once."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "1.jpg").write_bytes(b"x")
    (tmp_path / "a" / "up").symlink_to(tmp_path)
    (tmp_path / "b").symlink_to(tmp_path / "a")  # beside it: walked already
    (tmp_path / "c.jpg").write_bytes(b"x")
    expansion = JobExpansion(job(inputs=[str(tmp_path)]))
    tasks = expansion.next_tasks(10)
    assert expansion.error is None
    assert [i.name for _, items in tasks for i in items] == [
        str(tmp_path / "a" / "1.jpg"), str(tmp_path / "c.jpg")]


def test_a_list_file_saved_by_a_windows_editor_names_the_same_items(tmp_path: Path) -> None:
    """A byte order mark, CRLF line ends, a comment, blank lines and spaces around a name:
    the mark made the first name `\\ufeff/data/a.jpg`, a missing file."""
    listing = tmp_path / "list.txt"
    listing.write_bytes("\ufeff/data/a.jpg\r\n\r\n# two\r\n  /data/b c.jpg  \r\n".encode())
    names = [i.name for i in iter_items(job(inputs=[f"@{listing}"]))]
    assert names == ["/data/a.jpg", "/data/b c.jpg"]


def test_a_file_whose_name_is_not_utf8_is_an_item_a_worker_opens(tmp_path: Path) -> None:
    """Its name, read back with surrogates, failed the whole job when its task was written:
    "record does not fit schema Task: UnicodeEncodeError: ... surrogates not allowed"."""
    (tmp_path / "ok.jpg").write_bytes(b"ok")
    with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.jpg"), "wb") as latin:
        latin.write(b"latin-1")
    names = [i.name for i in iter_items(job(inputs=[str(tmp_path)]))]
    assert names == [f"file://{quote(str(tmp_path))}/caf%E9.jpg", str(tmp_path / "ok.jpg")]
    assert [fetch_item(n.encode().decode()) for n in names] == [b"latin-1", b"ok"]


def test_a_dangling_link_in_a_folder_is_an_item_with_its_error_not_a_gap(
        tmp_path: Path) -> None:
    """It vanished from the job's items (an inline job of the same folder was refused)."""
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "b.jpg").symlink_to(tmp_path / "gone.jpg")
    names = [i.name for i in iter_items(job(inputs=[str(tmp_path)]))]
    assert names == [str(tmp_path / "a.jpg"), str(tmp_path / "b.jpg")]
    with pytest.raises(ItemError, match="missing file"):
        fetch_item(names[1])
