"""What an inline submission reads, as docs/cli.md says of `--inline`: the items a path input
of the same inputs gives, in the same order, `@LIST` files and `file://` URIs included; what
cannot be sent (a FIFO, a device, an http URI) is one line before anything is sent. And how
a submission names a file whose name is not UTF-8."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from inferstream.client import submission
from inferstream.client.client import Client
from inferstream.controller.expansion import iter_names
from inferstream.jobs.errors import InlineTooLargeError, InputError
from inferstream.schemas.records import Job, read_record
from inferstream.testing import MemoryKafkaClients
from tests.unit.support.memory import CODEC, MODEL, make_config


@pytest.fixture
def client(clients: MemoryKafkaClients) -> Client:
    return Client(make_config(), CODEC, clients)


def sent_items(clients: MemoryKafkaClients) -> list[tuple[str, bytes]]:
    (record,) = clients.broker.records(make_config().topic("jobs"))
    sent = read_record(CODEC, record.value, Job)
    return [(item["name"], item["data"]) for item in sent["inline_items"]]


def test_an_inline_folder_sends_the_items_of_a_path_input_in_its_order(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path) -> None:
    """Inline took a folder's files before its subfolders' (`os.walk`), a path input each
    folder's entries in name order: the same folder's results came in two orders."""
    for rel in ("a/2.jpg", "b.jpg", "c/d/3.jpg", "e.jpg"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(rel.encode())
    client.submit(MODEL, [str(tmp_path)], inline=True)
    assert [name for name, _ in sent_items(clients)] == list(iter_names([str(tmp_path)]))
    assert [data for _, data in sent_items(clients)] == [
        b"a/2.jpg", b"b.jpg", b"c/d/3.jpg", b"e.jpg"]


def test_an_inline_list_file_and_file_uri_send_the_files_they_name(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both were read as relative paths: `cannot read /here/@list.txt`."""
    (tmp_path / "one.jpg").write_bytes(b"1")
    (tmp_path / "two words.jpg").write_bytes(b"2")
    (tmp_path / "list.txt").write_text("\ufeffone.jpg\r\n# not this\r\n\r\ntwo words.jpg\n")
    monkeypatch.chdir(tmp_path)
    uri = f"file://{tmp_path / 'one.jpg'}"
    client.submit(MODEL, ["@list.txt", uri], inline=True)
    assert sent_items(clients) == [
        (str(tmp_path / "one.jpg"), b"1"), (str(tmp_path / "two words.jpg"), b"2"),
        (uri, b"1")]


def test_the_uris_a_list_file_names_are_sent_inline_as_the_uris_given_alone(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path) -> None:
    """A list's lines are items as the inputs are (docs/cli.md): a `file://` URI in one was
    read as a relative path (`cannot read /here/file:/data/a.jpg`), and an http URI too,
    where either given alone is sent, or refused, as what it is."""
    (tmp_path / "one.jpg").write_bytes(b"1")
    uri = f"file://{tmp_path / 'one.jpg'}"
    (tmp_path / "uris.txt").write_text(f"{uri}\n")
    (tmp_path / "http.txt").write_text("http://example.invalid/a.jpg\n")
    client.submit(MODEL, [f"@{tmp_path / 'uris.txt'}"], inline=True)
    assert sent_items(clients) == [(uri, b"1")]
    with pytest.raises(InputError, match=r"^http://example\.invalid/a\.jpg is no local file"):
        client.submit(MODEL, [f"@{tmp_path / 'http.txt'}"], inline=True)


@pytest.mark.parametrize(("entry", "message"), [
    ("http://example.invalid/a.jpg", "http://example.invalid/a.jpg is no local file to send "
     "inline: submit it without --inline (inline=False), the workers fetch it"),
    ("@{tmp}/missing.txt", "cannot read list file {tmp}/missing.txt: No such file or "
     "directory"),
    ("/dev/null", "cannot read /dev/null: not a regular file"),
])
def test_an_inline_input_that_names_no_local_file_is_refused_in_one_line(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path, entry: str,
        message: str) -> None:
    with pytest.raises(InputError) as raised:
        client.submit(MODEL, [entry.format(tmp=tmp_path)], inline=True)
    assert str(raised.value) == message.format(tmp=tmp_path)
    assert clients.broker.records(make_config().topic("jobs")) == []


def test_an_inline_fifo_is_refused_instead_of_blocking_the_submission(
        client: Client, tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer: `submit --inline` hung for ever, saying nothing."""
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    refused: list[BaseException] = []

    def submit() -> None:
        try:
            client.submit(MODEL, [str(fifo)], inline=True)
        except InputError as exc:
            refused.append(exc)

    submitting = threading.Thread(target=submit, daemon=True)
    submitting.start()
    submitting.join(timeout=10)
    if submitting.is_alive():  # blocked in open(): a writer lets it go
        with open(fifo, "wb"):
            pass
        submitting.join()
    assert [str(exc) for exc in refused] == [f"cannot read {fifo}: not a regular file"]


def test_a_file_whose_name_is_not_utf8_is_sent_as_a_file_uri_and_a_folder_is_refused(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path) -> None:
    """Both were `record does not fit schema Job: UnicodeEncodeError: 'utf-8' codec can't
    encode character '\\udce9' ...`, naming no file."""
    latin = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9.jpg"))
    with open(latin, "wb") as handle:
        handle.write(b"latin-1")
    uri = f"file://{quote(str(tmp_path))}/caf%E9.jpg"
    client.submit(MODEL, [latin], inline=True)
    assert sent_items(clients) == [(uri, b"latin-1")]
    client.submit(MODEL, [latin])
    jobs = [read_record(CODEC, record.value, Job)
            for record in clients.broker.records(make_config().topic("jobs"))]
    assert [job["inputs"] for job in jobs if not job["inline_items"]] == [[uri]]
    folder = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xe9t\xe9"))
    os.mkdir(folder)
    with pytest.raises(InputError) as raised:
        client.submit(MODEL, [folder])
    assert str(raised.value) == (f"cannot send the name {quote(str(tmp_path))}/%E9t%E9: it "
                                 "is not UTF-8 (rename the folder or list file)")


def test_inline_files_over_the_limit_are_refused_before_the_rest_are_read(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file was read into memory, a folder of gigabytes too, before the encoded job was
    found too large."""
    monkeypatch.setattr(submission, "LARGE_MESSAGE_BYTES", 10, raising=False)
    (tmp_path / "a.jpg").write_bytes(b"123456")
    (tmp_path / "b.jpg").write_bytes(b"123456")
    (tmp_path / "c.jpg").symlink_to(tmp_path / "gone")  # read, it would refuse the job
    with pytest.raises(InlineTooLargeError) as raised:
        client.submit(MODEL, [str(tmp_path)], inline=True)
    assert str(raised.value) == (f"inline files are over 10 bytes by {tmp_path / 'b.jpg'}, "
                                 "the limit of a job: submit paths on a shared filesystem or "
                                 "split the job")
    assert clients.broker.records(make_config().topic("jobs")) == []


def test_inputs_and_the_output_path_may_be_pathlib_paths(
        client: Client, clients: MemoryKafkaClients, tmp_path: Path) -> None:
    """A list of Paths was refused as `inputs must be a list of paths or URIs`."""
    (tmp_path / "a.jpg").write_bytes(b"a")
    client.submit(MODEL, [tmp_path / "a.jpg"], output_path=tmp_path / "out.jsonl")
    client.submit(MODEL, [tmp_path], inline=True)
    jobs = [read_record(CODEC, record.value, Job)
            for record in clients.broker.records(make_config().topic("jobs"))]
    assert sorted((job["inputs"], job["output_path"], [i["name"] for i in job["inline_items"]])
                  for job in jobs) == [
        ([], None, [str(tmp_path / "a.jpg")]),
        ([str(tmp_path / "a.jpg")], str(tmp_path / "out.jsonl"), [])]
