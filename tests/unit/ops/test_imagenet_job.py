"""ops/bench/imagenet_job.py without a broker: its arguments, the @LIST it writes, the check
of a job's output and the re-issue counters it reads (the run itself needs a broker:
`python ops/bench/imagenet_job.py --items 3000` takes about a minute)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ops" / "bench"))

import imagenet_items
import imagenet_job

BENCH = Path(imagenet_job.__file__)


def test_the_defaults_are_imagenet_s_size_on_one_process_of_eight_members() -> None:
    args = imagenet_job.parse_args([])
    assert args.items == [1_281_167] and args.members == 8 and args.model == "sim:ms=0"
    args = imagenet_job.parse_args(["--items", "100000,400_000", "--members", "4",
                                    "--bootstrap", "127.0.0.1:9092"])
    assert args.items == [100_000, 400_000] and args.members == 4
    assert args.bootstrap == "127.0.0.1:9092" and not args.sysinfo
    assert imagenet_job.parse_args(["--sysinfo"]).sysinfo
    usage = subprocess.run([sys.executable, str(BENCH), "--help"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "ImageNet" in usage and "--members" in usage
    first = imagenet_job.banner("ops/bench/imagenet_job.py", ["--items", "3000"])
    assert first.startswith("# ops/bench/imagenet_job.py --items 3000 at ")
    assert "cores" in first and "UTC, load average at start " in first


def test_worker_processes_share_the_members_the_first_taking_the_rest(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert imagenet_job.parse_args([]).worker_processes == 1
    started: list[tuple[str, ...]] = []
    fleet = imagenet_job.JobFleet("127.0.0.1:9", 1, 8, tmp_path, "t")
    monkeypatch.setattr(fleet, "worker", lambda *args: started.append(args))
    fleet.start_workers("sim:ms=0", 8, 3)
    assert fleet.workers == ["w", "w2", "w3"]
    assert started == [("w", "sim:ms=0", "--members", "4"),
                       ("w2", "sim:ms=0", "--members", "2"),
                       ("w3", "sim:ms=0", "--members", "2")]


@pytest.mark.parametrize("items", ["0", "100,-1", ",", "many"])
def test_item_counts_below_one_or_not_numbers_are_refused(items: str) -> None:
    with pytest.raises(SystemExit):
        imagenet_job.parse_args(["--items", items])


def output_line(name: str, status: str = "ok") -> str:
    return json.dumps({"job_id": "j", "item": name, "status": status, "top_k": []}) + "\n"


def test_a_complete_output_passes_in_any_order(tmp_path: Path) -> None:
    listing = imagenet_items.write_imagenet_listing(tmp_path / "items.txt", 2500)
    names = listing.read_text().splitlines()
    assert len(names) == len(set(names)) == 2500
    assert names[1001] == "/data/imagenet/train/n00000001/n00000001_0001001.JPEG"
    output = tmp_path / "out.jsonl"
    output.write_text("".join(output_line(name) for name in reversed(names)))
    check = imagenet_items.check_output(output, 2500)
    assert check.passed and check.ok == check.lines == 2500


def test_missing_repeated_failed_and_foreign_items_each_fail_the_check(
        tmp_path: Path) -> None:
    names = [imagenet_items.item_name(i) for i in range(10)]
    output = tmp_path / "out.jsonl"
    output.write_text("".join([*(output_line(n) for n in names[:7]), output_line(names[3]),
                               output_line(names[8], "error"), output_line("/elsewhere.jpg"),
                               output_line(imagenet_items.item_name(10))]))
    check = imagenet_items.check_output(output, 10)
    assert not check.passed
    assert (check.lines, check.ok, check.errors, check.missing, check.repeated,
            check.foreign) == (11, 8, 1, 2, 1, 2)


def test_tasks_issued_and_re_issued_by_reason_come_from_the_controller_s_metrics() -> None:
    page = "\n".join([
        "# HELP inferstream_controller_tasks_issued_total Tasks issued (first attempts)",
        'inferstream_controller_tasks_issued_total{pool="default"} 40037.0',
        'inferstream_controller_tasks_issued_total{pool="gpu"} 3.0',
        'inferstream_controller_tasks_reissued_total{pool="default",reason="late"} 12.0',
        'inferstream_controller_tasks_reissued_total{pool="default",reason="declined"} 0.0',
        'inferstream_controller_tasks_reissued_total{pool="gpu",reason="late"} 1.0',
        'inferstream_controller_tasks_reissued_created{pool="gpu",reason="late"} 1.7e+09',
        'inferstream_controller_tasks_done_total{pool="default"} 40037.0'])
    assert imagenet_job.reissue_counters(page) == (40040, {"late": 13, "declined": 0})


def test_peak_memory_and_cpu_are_read_from_proc() -> None:
    assert 1 < imagenet_job.peak_rss_mib(os.getpid()) < 64 * 1024
    spent = imagenet_job.cpu_s(os.getpid())
    sum(range(2_000_000))
    assert imagenet_job.cpu_s(os.getpid()) > spent


def test_the_table_shows_each_size_s_rate_share_re_issued_and_checks() -> None:
    row = imagenet_job.Measured(
        100_000, seconds=40.0, job_rate=3001.5, read_s=12.25, issued=3125,
        reissued={"late": 25, "declined": 0}, logged_reissues=25,
        peak_mib={"controller": 80.0, "worker": 560.0, "submit": 90.0, "results": 60.0,
                  "controller now": 78.0},
        cpu_s_per_item={"broker": 2e-4, "controller": 5e-5, "worker": 2e-4, "submit": 4e-5},
        checks={"submit": imagenet_items.OutputCheck(100_000, 100_000, 100_000)},
        loads=(12.0, 14.5), ledger_entries=1)
    assert ("| 100,000 | 40.0 | 2,500 | 3,002 | 12.2 | 3,125 | late 25 (0.80%) | 25 | "
            "80, 560, 90, 60 | 78 | 1 | 200, 50, 200, 40 | submit ok | 12.0 -> 14.5 |"
            ) in imagenet_job.table([row])


def test_one_fleet_rows_count_each_job_s_own_tasks_not_the_controller_s_running_total(
        ) -> None:
    args = imagenet_job.parse_args(["--items", "100,100", "--one-fleet", "--chunk-size", "4"])
    assert args.one_fleet and args.chunk_size == 4
    first = imagenet_job.Measured(100, issued=25, reissued={"migrated": 1})
    second = imagenet_job.since_last(
        imagenet_job.Measured(100, issued=50, reissued={"migrated": 3, "declined": 0},
                              logged_reissues=3), [first])
    assert (second.issued, second.reissued, second.logged_reissues) == (
        25, {"migrated": 2, "declined": 0}, 3)
