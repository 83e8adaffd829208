"""The client's commands as a user meets them, on the in-memory transport: what `submit
--wait` says while it waits, `status` and `results` of jobs unknown or not yet accepted,
one-line errors for bad options, and the exit code of a job whose every item failed."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferstream.client.client import Client, Job
from inferstream.controller.replica import Controller
from inferstream.jobs import output
from inferstream.jobs.errors import JobRejectedError, JobTimeoutError
from inferstream.jobs.follow import OutputFollower
from inferstream.jobs.ids import new_job_id
from inferstream.schemas.records import Job as JobRecord
from inferstream.schemas.records import (
    JobEvent,
    JobEventType,
    read_record,
)
from inferstream.testing import MemoryKafkaClients
from tests.unit.client.conftest import Cli
from tests.unit.support.fake_sysinfo import FakeSysInfo, worker
from tests.unit.support.memory import CODEC, MODEL, make_config
from tests.unit.support.pool import Responder
from tests.unit.support.records import put_event, put_results, settled
from tests.unit.support.running import Running


@pytest.fixture
def controller(running: Running, make_controller: Callable[..., Controller]) -> Controller:
    """A controller replica running on its own thread until the test ends."""
    return running.controller(make_controller())


def submit(clients: MemoryKafkaClients, items: int = 3) -> Job:
    return Client(make_config(), CODEC, clients).submit(MODEL, [f"i{n}" for n in range(items)])


class _Told(Exception):
    """Ends a wait once the notice a test waits for is told."""


def notices_until(job: Job, told: Callable[[str], bool]) -> list[str]:
    """Every notice `job.wait` tells until one that `told` accepts (included): the wait ends
    there, not on a deadline, so a slow machine changes when it ends, not what it says."""
    notices: list[str] = []

    def on_notice(line: str) -> None:
        notices.append(line)
        if told(line):
            raise _Told
    with pytest.raises(_Told):
        job.wait(timeout_s=60, on_notice=on_notice, quiet_s=0.15)
    return notices


def test_wait_says_when_no_controller_has_accepted_the_job(
        clients: MemoryKafkaClients) -> None:
    job = submit(clients)
    notices = notices_until(job, lambda _line: True)
    assert len(notices) == 1
    assert f"no controller has accepted job {job.job_id}" in notices[0]
    assert "`inferstream controller`" in notices[0]
    with pytest.raises(JobTimeoutError, match="it goes on"):
        job.wait(timeout_s=0.05)


def test_wait_says_when_the_pool_has_no_live_worker(clients: MemoryKafkaClients,
                                                    controller: Controller) -> None:
    job = submit(clients)
    notices = notices_until(job, lambda line: "no controller" not in line)
    assert re.fullmatch(
        f"no worker in pool 'default' has taken a task of job {job.job_id} after [0-9]+ s: "
        f"the pool has no live worker; start one with "
        f"`inferstream worker --pool default --model {re.escape(MODEL)}`", notices[-1])


def test_status_of_an_unknown_job_is_an_error(cli: Cli) -> None:
    code, out, err = cli("status", "20260101-000000-deadbeef")
    assert code == 2 and out == ""
    assert err.startswith("inferstream: error: no job 20260101-000000-deadbeef on topic t.jobs")
    assert err.count("\n") == 1


def test_status_lists_jobs_submitted_but_not_yet_accepted(clients: MemoryKafkaClients,
                                                          cli: Cli) -> None:
    job = submit(clients)
    code, out, _ = cli("status")
    assert code == 0
    assert out.split() == [job.job_id, "submitted", MODEL, "not", "yet", "accepted", "by",
                           "a", "controller"]
    code, out, _ = cli("status", job.job_id)
    assert code == 0 and "submitted" in out


def test_status_of_several_jobs_shows_each_in_the_order_given(clients: MemoryKafkaClients,
                                                              cli: Cli) -> None:
    """`status A B` was "unrecognized arguments": one job at a time, or every recent one."""
    first, second = submit(clients), submit(clients)
    code, out, _ = cli("status", second.job_id, first.job_id, second.job_id)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [second.job_id, first.job_id]
    code, out, _ = cli("status", first.job_id, second.job_id, "--json")
    assert [job["job_id"] for job in json.loads(out)] == [first.job_id, second.job_id]
    code, out, _ = cli("status", first.job_id, "--json")
    assert json.loads(out)["job_id"] == first.job_id  # one job: its object, as before
    code, out, err = cli("status", first.job_id, new_job_id())
    assert (code, out) == (2, "") and "no job" in err


def test_results_of_an_unknown_or_unaccepted_job_is_an_error(clients: MemoryKafkaClients,
                                                             cli: Cli) -> None:
    code, out, err = cli("results", new_job_id())
    assert (code, out) == (2, "") and "no job" in err
    job = submit(clients)
    code, out, err = cli("results", job.job_id)
    assert (code, out) == (2, "") and "has not been accepted by a controller yet" in err


def test_results_output_of_a_completed_job_missing_a_task_is_an_error_and_leaves_no_file(
        clients: MemoryKafkaClients, cli: Cli, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=3, chunk=2, order=[0, 2])
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=3, chunk=2)
    monkeypatch.setattr(output, "READ_TIMEOUT_S", 0.2)
    code, out, err = cli("results", job_id, "--output", str(tmp_path / "out.jsonl"))
    assert (code, out) == (2, "")
    assert err.startswith(f"inferstream: error: job {job_id} completed, but the results of 1 "
                          "of its 3 tasks were not read back in time")
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_job_whose_every_item_failed_exits_non_zero(clients: MemoryKafkaClients,
                                                      cli: Cli) -> None:
    config, job_id = make_config(), new_job_id()
    put_results(clients, config, job_id, tasks=2, chunk=2, ok=False)
    put_event(clients, config, job_id, JobEventType.COMPLETED, tasks=2, chunk=2, ok=False)
    code, out, err = cli("results", job_id)
    assert code == 1
    assert len(out.splitlines()) == 4
    assert f"every item of job {job_id} failed (4 errors)" in err


@pytest.mark.parametrize(("flag", "value", "rule"), [
    ("--chunk-size", "0", ">= 1, got 0"), ("--top-k", "0", ">= 1, got 0"),
    ("--chunk-size", "-3", ">= 1, got -3"), ("--top-k", "-1", ">= 1, got -1"),
    # was '--inputs must be a list of paths or URIs (for one, a list of one), got ['']'
    ("--input", "", "paths, URIs or @LIST files, got an empty one")])
def test_a_submit_option_out_of_range_is_a_one_line_error_naming_its_flag(
        clients: MemoryKafkaClients, cli: Cli, flag: str, value: str, rule: str) -> None:
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg", flag, value)
    assert (code, out) == (2, "")
    assert err == f"inferstream: error: {flag} must be {rule}\n"
    assert clients.broker.values(make_config().topic("jobs")) == []


def test_ctrl_c_during_submit_wait_says_the_job_goes_on(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_args: Any, **_kwargs: Any) -> None:
        raise KeyboardInterrupt
    monkeypatch.setattr(Job, "wait", interrupted)
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg", "--wait")
    job_id = out.strip()
    assert code == 130
    assert f"job {job_id} goes on" in err
    assert f"`inferstream status {job_id}`" in err
    assert f"`inferstream results {job_id} --output FILE`" in err


def test_sigterm_during_submit_output_ends_the_wait_and_leaves_no_partial_file(
        cli: Cli, controller: Controller, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The output is being written while the job runs; a SIGTERM ends the wait as Ctrl-C
    does (exit 128 + 15), and neither the file nor its partial one is left."""
    wait = Job.wait

    def terminated(job: Job, *args: Any, **kwargs: Any) -> Any:
        def progress(status: Any) -> None:
            kwargs["on_progress"](status)
            os.kill(os.getpid(), signal.SIGTERM)  # once the output is being written
        return wait(job, *args, **{**kwargs, "on_progress": progress})
    monkeypatch.setattr(Job, "wait", terminated)
    before = signal.getsignal(signal.SIGTERM)
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg",
                         "--output", str(tmp_path / "out.jsonl"))
    job_id = out.strip()
    assert code == 143
    assert f"job {job_id} goes on" in err
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_ctrl_c_while_submit_writes_the_output_of_a_completed_job_says_so(
        cli: Cli, controller: Controller, make_responder: Callable[..., Responder],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_responder()
    finish = OutputFollower.finish

    def interrupted(follower: OutputFollower, *args: Any, **kwargs: Any) -> int:
        finish(follower, *args, **kwargs)  # the file is in place: it stays, whole
        raise KeyboardInterrupt
    monkeypatch.setattr(OutputFollower, "finish", interrupted)
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg",
                         "--output", str(tmp_path / "out.jsonl"), "--timeout", "20")
    job_id = out.strip()
    assert code == 130
    assert f"interrupted while writing the output of job {job_id} (completed)" in err
    assert f"`inferstream results {job_id} --output FILE`" in err
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


@pytest.mark.parametrize(("option", "value"), [("top_k", 0), ("chunk_size", -2)])
def test_the_controller_rejects_a_foreign_job_with_an_option_below_one(
        clients: MemoryKafkaClients, running: Running,
        make_controller: Callable[..., Controller], option: str, value: int) -> None:
    """A job record from another producer, not checked by inferstream's Client."""
    config = make_config()
    fields: dict[str, Any] = {"top_k": 5, "chunk_size": 4, option: value}
    foreign = JobRecord(job_id=new_job_id(), model=MODEL, model_version=None, pool="default",
                        inputs=["/a.jpg"], inline_items=[], submitted_at=0, submitter="other",
                        output_path=None, **fields)
    clients.producer({}).produce(config.topic("jobs"), CODEC.encode("Job", foreign),
                                 foreign["job_id"].encode(), partition=0)
    running.controller(make_controller())
    running.until(settled(clients.broker, config, JobEventType.REJECTED))
    events = [read_record(CODEC, v, JobEvent)
              for v in clients.broker.values(config.topic("job-events"))]
    assert [(e["type"], e["reason"]) for e in events] == [
        (JobEventType.REJECTED, f"{option} must be >= 1, got {value}")]


def test_item_names_are_absolute_with_and_without_inline(
        clients: MemoryKafkaClients, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"not really a jpeg")
    monkeypatch.chdir(tmp_path)
    client = Client(make_config(), CODEC, clients)
    client.submit(MODEL, ["photos"], inline=True)
    client.submit(MODEL, ["photos", "@list.txt"])
    jobs = [read_record(CODEC, v, JobRecord)
            for v in clients.broker.values(make_config().topic("jobs"))]
    # by content, not by position: the two jobs' ids may hash to either partition
    (inline,) = [job for job in jobs if job["inline_items"]]
    (named,) = [job for job in jobs if not job["inline_items"]]
    assert [i["name"] for i in inline["inline_items"]] == [str(tmp_path / "photos" / "cat.jpg")]
    assert named["inputs"] == [str(tmp_path / "photos"), f"@{tmp_path / 'list.txt'}"]


def test_an_output_file_that_cannot_be_written_is_a_one_line_error_before_submitting(
        clients: MemoryKafkaClients, cli: Cli, tmp_path: Path) -> None:
    target = str(tmp_path / "missing" / "out.jsonl")
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg", "--output", target)
    assert (code, out) == (2, "")
    assert err == f"inferstream: error: --output {target}: cannot write in {tmp_path}/missing\n"
    assert clients.broker.values(make_config().topic("jobs")) == []


def test_submit_wait_exits_non_zero_when_every_item_failed(
        cli: Cli, controller: Controller, make_responder: Callable[..., Responder],
        tmp_path: Path) -> None:
    make_responder(error="not an image")  # a pool whose every item fails
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg", "b.jpg",
                         "--output", str(tmp_path / "out.jsonl"), "--timeout", "20")
    job_id = out.strip()
    assert code == 1
    assert f"every item of job {job_id} failed (2 errors)" in err
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert [json.loads(line)["error"] for line in lines] == ["not an image"] * 2


def test_cancel_wait_prints_the_cancelled_job_and_a_second_cancel_says_so(
        clients: MemoryKafkaClients, cli: Cli, controller: Controller) -> None:
    """No worker runs: the job stays active until `cancel --wait` ends it, CANCELLED with
    nothing done; cancelling it again is not an error."""
    job = submit(clients)
    for status in job.events(timeout_s=10):
        if status.state == "ACCEPTED":
            break
    code, out, err = cli("cancel", job.job_id, "--wait", "--timeout", "10")
    assert code == 0, err
    assert out.split()[:4] == [job.job_id, "cancelled", MODEL, "0/3"]
    assert f"cancel requested for job {job.job_id}" in err
    code, _, err = cli("cancel", job.job_id)
    assert code == 0 and "already cancelled: nothing to cancel" in err
    code, _, err = cli("cancel", new_job_id())
    assert code == 2 and "no job" in err


def test_submit_of_name_colon_version_pins_the_version_and_status_shows_it(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    """`--model faces:3` is model faces, version 3, in the job record; status shows the
    reference before the controller accepts the job and the version its events say after."""
    code, _, _ = cli("submit", "--model", "faces:3", "--input", "a.jpg")
    (value,) = clients.broker.values(make_config().topic("jobs"))
    job = read_record(CODEC, value, JobRecord)
    assert (code, job["model"], job["model_version"]) == (0, "faces", 3)
    code, out, _ = cli("status")
    assert out.split()[1:3] == ["submitted", "faces:3"]

    config = make_config()
    put_event(clients, config, job["job_id"], JobEventType.ACCEPTED, model="faces", version=3)
    code, out, _ = cli("status", job["job_id"])
    assert out.split()[1:3] == ["accepted", "faces:3"]
    code, out, _ = cli("status", job["job_id"], "--json")
    assert json.loads(out)["model_version"] == 3


def test_a_malformed_model_goes_to_the_controller_which_rejects_it_with_the_reason(
        clients: MemoryKafkaClients, controller: Controller) -> None:
    job = Client(make_config(), CODEC, clients).submit("resnet50:2", ["a.jpg"])
    with pytest.raises(JobRejectedError, match="only repository models have versions"):
        job.wait(timeout_s=10)


def test_submit_output_of_a_rejected_job_leaves_no_file(
        cli: Cli, controller: Controller, tmp_path: Path) -> None:
    code, _, err = cli("submit", "--model", "resnet50:2", "--input", "a.jpg",
                       "--output", str(tmp_path / "out.jsonl"), "--timeout", "20")
    assert code == 2
    assert "only repository models have versions" in err
    assert list(tmp_path.iterdir()) == []


def test_submit_sends_the_priority_and_weight_and_status_shows_them(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    code, _, _ = cli("submit", "--model", MODEL, "--input", "a.jpg", "--priority", "3",
                     "--weight", "2.5")
    (value,) = clients.broker.values(make_config().topic("jobs"))
    job = read_record(CODEC, value, JobRecord)
    assert (code, job["priority"], job["weight"]) == (0, 3, 2.5)

    config = make_config()
    put_event(clients, config, job["job_id"], JobEventType.ACCEPTED, priority=3, weight=2.5)
    code, out, _ = cli("status", job["job_id"])
    assert out.split()[-2:] == ["priority=3", "weight=2.5"]
    code, out, _ = cli("status", job["job_id"], "--json")
    assert (json.loads(out)["priority"], json.loads(out)["weight"]) == (3, 2.5)


def test_a_job_of_the_default_priority_and_weight_reads_as_before_in_status(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    cli("submit", "--model", MODEL, "--input", "a.jpg")
    (value,) = clients.broker.values(make_config().topic("jobs"))
    job = read_record(CODEC, value, JobRecord)
    assert (job["priority"], job["weight"]) == (0, 1.0)
    put_event(clients, make_config(), job["job_id"], JobEventType.ACCEPTED)
    _, out, _ = cli("status", job["job_id"])
    assert "priority" not in out and out.split()[-1] == "error=0"


@pytest.mark.parametrize("weight", ["0", "-1", "nan"])
def test_a_weight_that_is_not_positive_is_a_one_line_error_before_submitting(
        clients: MemoryKafkaClients, cli: Cli, weight: str) -> None:
    code, out, err = cli("submit", "--model", MODEL, "--input", "a.jpg", "--weight", weight)
    assert code == 2 and out == ""
    assert err.startswith("inferstream: error: --weight must be a positive number, got")
    assert clients.broker.values(make_config().topic("jobs")) == []


def test_top_jobs_lists_the_running_jobs_beside_the_workers(
        clients: MemoryKafkaClients, cli: Cli) -> None:
    config = make_config()
    put_event(clients, config, "20261205-200000-000000aa", JobEventType.PROGRESS)
    put_event(clients, config, "20261205-200000-000000bb", JobEventType.ACCEPTED, priority=2,
              weight=3.0)
    put_event(clients, config, "20261205-200000-000000cc", JobEventType.COMPLETED)
    app = FakeSysInfo()
    app.workers = [worker("w1")]
    with app.serving():
        code, out, _ = cli("top", "--once", "--jobs", "--sysinfo-url", app.url)
        _, printed, _ = cli("top", "--once", "--json", "--jobs", "--sysinfo-url", app.url)
    assert code == 0
    rows = out.split("\nJOB ", 1)[1].splitlines()[1:]
    assert [row.split()[:6] for row in rows] == [
        ["20261205-200000-000000bb", "?", "accepted", "sim:ms=0", "2", "3"],
        ["20261205-200000-000000aa", "?", "progress", "sim:ms=0", "0", "1"]]
    assert [(j["job_id"], j["priority"]) for j in json.loads(printed)["jobs"]] == [
        ("20261205-200000-000000aa", 0), ("20261205-200000-000000bb", 2)]
