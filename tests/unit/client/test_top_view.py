"""`inferstream top`'s table on fixed input, and `top --once` against a fake sysinfo app."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from inferstream.cli import main
from inferstream.client.client import JobStatus
from inferstream.client.overview import (
    Snapshot,
    Style,
    ago,
    latency,
    partitions,
    plain_text,
    pool_totals,
    render,
)
from inferstream.client.sysinfo_api import WorkerInfo
from inferstream.schemas.records import WorkerHealth
from tests.unit.support.fake_sysinfo import NOW_MS, FakeSysInfo, policy_entry, unused_url, worker


def info(name: str, **fields: Any) -> WorkerInfo:
    w: Any = worker(name, **fields)
    w["health"] = WorkerHealth(w["health"])
    result: WorkerInfo = w
    return result


WORKERS = [
    info("w-fast", items_per_s=99.5, share=0.8, models=["sim:ms=10"]),
    info("w-slow", items_per_s=25.0, share=0.2, models=["sim:ms=40"], device="cuda:0",
         accelerator="H200", latency_seconds_p95=1.25, assigned_partitions=[3, 4]),
    info("w-dead", health="STALE", items_per_s=7.0, models=["resnet50"],
         last_seen=NOW_MS - 75_000),
    info("c-1", pool="cpu", share=None, latency_seconds_p95=None, assigned_partitions=[]),
]


def snapshot(workers: list[WorkerInfo]) -> Snapshot:
    return {"health": {"status": "ok", "workers": 3, "pools": ["cpu", "gpu"],
                       "policy_updated_at": NOW_MS - 3_000},
            "workers": workers, "policy": [], "pools": pool_totals(workers)}


def test_pool_totals_count_every_worker_but_add_only_healthy_ones() -> None:
    totals = pool_totals(WORKERS)
    assert totals["gpu"] == {"workers": 3, "healthy": 2, "items_per_s": 124.5,
                             "models": ["sim:ms=10", "sim:ms=40"]}
    assert totals["cpu"]["workers"] == 1


@pytest.mark.parametrize(("then_ms", "shown"), [
    (NOW_MS - 2_400, "2s ago"), (NOW_MS - 59_999, "59s ago"), (NOW_MS - 75_000, "1m ago"),
    (NOW_MS - 7_200_000, "2h ago"), (NOW_MS - 3 * 86_400_000, "3d ago"),
    (NOW_MS + 5_000, "0s ago"), (None, "-"),
])
def test_last_seen_reads_as_time_ago(then_ms: int | None, shown: str) -> None:
    assert ago(then_ms, NOW_MS) == shown


def test_cells_for_latency_and_partitions() -> None:
    assert [latency(0.0331), latency(1.25), latency(None)] == ["33ms", "1.25s", "-"]
    assert partitions([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert partitions([]) == "-"


def test_one_row_per_worker_sorted_by_pool_then_name() -> None:
    text = plain_text(render(snapshot(WORKERS), url="http://app:6066", now_ms=NOW_MS))
    lines = text.splitlines()
    assert lines[0].startswith("inferstream top  http://app:6066  status ok  3 live workers")
    assert "policy updated 3s ago" in lines[0]
    rows = [line.split()[0] for line in lines[3:7]]
    assert rows == ["c-1", "w-dead", "w-fast", "w-slow"]
    assert lines[6].split() == ["w-slow", "gpu", "sim:ms=40", "cuda:0", "H200", "25.0",
                                "1.25s", "0.20", "3-4", "HEALTHY", "2s", "ago"]
    assert lines[4].split()[-3:] == ["STALE", "1m", "ago"]


def test_a_gone_worker_shows_no_partitions_a_stale_one_its_last() -> None:
    """A GONE worker's partitions are others' by then: they showed under two workers until
    the app forgot it (600 s)."""
    workers = [info("w-gone", health="GONE", assigned_partitions=[0, 1],
                    last_seen=NOW_MS - 120_000),
               info("w-live", assigned_partitions=[0, 1]),
               info("w-stale", health="STALE", assigned_partitions=[2])]
    lines = plain_text(render(snapshot(workers), url="u", now_ms=NOW_MS)).splitlines()
    cells = {line.split()[0]: line.split() for line in lines if line.startswith("w-")}
    assert cells["w-gone"][-4:] == ["-", "GONE", "2m", "ago"]
    assert cells["w-live"][-4:] == ["0-1", "HEALTHY", "2s", "ago"]
    assert cells["w-stale"][-4:] == ["2", "STALE", "2s", "ago"]


def test_totals_follow_the_rows() -> None:
    lines = plain_text(render(snapshot(WORKERS), url="u", now_ms=NOW_MS)).splitlines()
    start = lines.index(next(line for line in lines if line.startswith("POOL  ")))
    assert lines[start + 1].split() == ["cpu", "1", "(1", "healthy)", "99.5", "sim:ms=10"]
    assert lines[start + 2].split() == ["gpu", "3", "(2", "healthy)", "124.5",
                                        "sim:ms=10,sim:ms=40"]


def test_unhealthy_rows_and_errors_have_their_own_style() -> None:
    view = render(snapshot(WORKERS), url="u", now_ms=NOW_MS, error="cannot reach it")
    assert view[1].text == "! cannot reach it (retrying)" and view[1].style is Style.ERROR
    assert "status error (last known below)" in view[0].text
    stale = next(line for line in view if line.text.startswith("w-dead"))
    assert stale.style is Style.UNHEALTHY


def test_long_names_are_cut_and_lines_fit_the_width() -> None:
    long = info("a-worker-name-longer-than-its-column", models=["m1", "m2", "m3", "m4", "m5"])
    view = render(snapshot([long]), url="u", now_ms=NOW_MS, width=60)
    assert all(len(line.text) <= 60 for line in view)
    assert view[3].text.startswith("a-worker-name-l~ ")


def test_a_long_error_wraps_to_the_width() -> None:
    error = "cannot reach the sysinfo app at http://app:6066 (connection refused); set --x"
    view = render(None, url="u", now_ms=NOW_MS, error=error, width=40)
    wrapped = [line.text for line in view if line.style is Style.ERROR]
    assert len(wrapped) > 1 and all(len(text) <= 40 for text in wrapped)
    assert " ".join(t.strip() for t in wrapped) == f"! {error} (retrying)"


def test_before_any_answer_the_view_is_the_title_and_the_error() -> None:
    view = render(None, url="http://app:6066", now_ms=NOW_MS, error="refused")
    assert [line.text for line in view][1:] == ["! refused (retrying)"]
    assert "no data yet" in view[0].text


def test_jobs_run_in_the_order_the_controller_serves_them_with_their_shares() -> None:
    """`top --jobs`: the running jobs, highest priority first, then the heaviest."""
    jobs = [JobStatus("j-batch", "PROGRESS", "sim:ms=2", None, 100_000, None, 2_500,
                      rate_items_per_s=812.0),
            JobStatus("j-light", "ACCEPTED", "sim:ms=2", weight=0.5),
            JobStatus("j-urgent", "PROGRESS", "sim:ms=2", None, 500, None, 100, priority=5),
            JobStatus("j-done", "COMPLETED", "sim:ms=2", priority=9)]
    lines = plain_text(render(snapshot(WORKERS), url="u", now_ms=NOW_MS, jobs=jobs))
    table = lines.split("JOB ", 1)[1].splitlines()[1:]
    assert [row.split() for row in table] == [
        ["j-urgent", "?", "progress", "sim:ms=2", "5", "1", "100/500", "-"],
        ["j-batch", "?", "progress", "sim:ms=2", "0", "1", "2500/100000", "812.0"],
        ["j-light", "?", "accepted", "sim:ms=2", "0", "0.5", "0/?", "-"]]
    assert "JOB " not in plain_text(render(snapshot(WORKERS), url="u", now_ms=NOW_MS))


@pytest.fixture
def fake() -> Iterator[FakeSysInfo]:
    app = FakeSysInfo()
    app.workers = [worker("w-fast"), worker("w-slow", items_per_s=25.0, share=0.2)]
    app.policy = [policy_entry("w-fast"), policy_entry("w-slow", share=0.2)]
    with app.serving():
        yield app


def test_once_json_prints_one_snapshot(fake: FakeSysInfo,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--once", "--json", "--sysinfo-url", fake.url]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert set(printed) == {"health", "workers", "policy", "pools"}
    assert [w["worker"] for w in printed["workers"]] == ["w-fast", "w-slow"]
    assert [e["share"] for e in printed["policy"]] == [0.8, 0.2]
    assert printed["pools"]["gpu"]["items_per_s"] == 124.5
    assert printed["workers"][0]["health"] == "HEALTHY"


def test_once_prints_the_table_as_plain_text(fake: FakeSysInfo,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--once", "--sysinfo-url", fake.url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("w-")] == [
        "w-fast", "w-slow"]


@pytest.mark.parametrize("flags", [["--once", "--json"], ["--once"]])
def test_once_against_nothing_fails_with_one_line(flags: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    url = unused_url()
    assert main(["top", *flags, "--sysinfo-url", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and url in captured.err
    assert captured.err.startswith("inferstream: error: cannot reach the sysinfo app")


@pytest.mark.parametrize("flags", [["--once", "--jobs"], ["--json", "--jobs"]])
def test_jobs_from_a_broker_that_does_not_answer_is_one_line(
        fake: FakeSysInfo, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Not librdkafka's log of every failed connection and a traceback (exit 1)."""
    assert main(["top", *flags, "--sysinfo-url", fake.url, "--bootstrap-servers",
                 "127.0.0.1:1", "--connect-timeout-s", "0.5"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith("inferstream: error: no Kafka broker answered at 127.0.0.1:1")


def test_jobs_with_a_missing_ssl_cafile_names_it_in_one_line(
        fake: FakeSysInfo, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """As every other command says it: not librdkafka's "ssl.ca.location failed: BIO lib"
    in a traceback (exit 1) when `top --jobs` builds its reader."""
    cafile = tmp_path / "missing-ca.pem"
    assert main(["top", "--once", "--jobs", "--sysinfo-url", fake.url, "--bootstrap-servers",
                 "127.0.0.1:1", "--security-protocol", "SSL", "--ssl-cafile",
                 str(cafile)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"inferstream: error: ssl_cafile {cafile}: cannot read it " \
                           "(No such file or directory)\n"
