"""Benchmark of issue 29.4: a small job submitted 5 s after a big one of the same pool.

A controller and `--workers` sim workers (`sim:ms=--ms`, no sysinfo app: the controller paces
by the speeds their results show) on `--partitions` task partitions, each case on a fresh
topic prefix of one broker (started here by ops/kafka/cluster, or `--bootstrap`'s):

- `alone`: the small job (`--small` items) alone;
- `equal`: the big job (`--big` items), then `--delay` s later the small one, same priority;
- `higher`: the same, the small job submitted with `--priority 1`.

The small job's time runs from its submission to its COMPLETED event; the goals are
<= 3x alone + issue_ahead_s (equal) and <= 1.5x alone + 2 s (higher). The big job is waited
for too and audited: every item of each job has exactly one committed result (no lost item,
no (task, attempt) record twice; a task taken back and issued again adds a record of its own
only where its worker had started it) and the job's output holds each item once. Prints a
Markdown table for BENCHMARKS.md.

Run against an earlier commit (the figures before priorities) by pointing PYTHONPATH at that
commit's `src` and copying this script beside that commit's ops/bench: `--cases` names what it
can run (a client without priorities submits every job at priority 0).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, SeenResult, audit
from failover_common import (
    Fleet,
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)

#: (case, the small job's priority, whether the big job runs)
CASES = {"alone": (0, False), "equal": (0, True), "higher": (1, True)}


def submit(fleet: Fleet, listing: Path, args: argparse.Namespace, priority: int) -> Any:
    extra: dict[str, Any] = {"priority": priority} if priority else {}  # none before 29.4
    return fleet.client.submit(f"sim:ms={args.ms}", [f"@{listing}"], chunk_size=args.chunk,
                               **extra)


def run_case(bootstrap: str, logdir: Path, name: str, args: argparse.Namespace
             ) -> dict[str, object]:
    priority, with_big = CASES[name]
    fleet = Fleet(bootstrap, args.partitions, logdir, f"prio-{name}")
    try:
        fleet.create_topics()
        fleet.start("controller", "controller")
        names = [f"w{i}" for i in range(1, args.workers + 1)]
        for worker in names:
            fleet.worker(worker, f"sim:ms={args.ms}", "--sysinfo-interval", "0")
        wait_for_group(fleet, names, timeout_s=300)
        reader = CommittedResults(fleet.config).start()
        jobs = {}
        if with_big:
            big_list = write_listing(logdir / f"{name}-big.txt", args.big, f"{name}-big")
            jobs["big"] = (submit(fleet, big_list, args, 0), args.big, f"{name}-big")
            time.sleep(args.delay)
        small_list = write_listing(logdir / f"{name}-small.txt", args.small, f"{name}-small")
        submitted = time.time()
        small = submit(fleet, small_list, args, priority)
        jobs["small"] = (small, args.small, f"{name}-small")
        small.wait(timeout_s=3600)
        row: dict[str, object] = {"case": name, "small_s": time.time() - submitted,
                                  "big_s": None}
        if with_big:
            jobs["big"][0].wait(timeout_s=3600)
            row["big_s"] = time.time() - submitted + args.delay
        reader.read_to_end()
        audit_jobs(row, jobs, reader.snapshot())
        reader.stop()
        log = fleet.log_path("controller").read_text(errors="replace")
        row["taken_back"] = len(re.findall(r"taken back from partition", log))
        return row
    finally:
        fleet.stop_all()


def audit_jobs(row: dict[str, object], jobs: dict[str, tuple[Any, int, str]],
               results: list[SeenResult]) -> None:
    """Each job's lost items, duplicate records and whether its output holds each item
    once, into `row`."""
    for key, (job, items, tag) in jobs.items():
        expected = [f"{tag}-{i:07d}" for i in range(items)]
        check = audit(results, job.job_id, expected)
        output = sorted(str(line["item"]).rsplit("/", 1)[-1] for line in job.results())
        row[f"{key}_lost"], row[f"{key}_dups"] = check["lost_items"], check[
            "duplicate_records"]
        row[f"{key}_exact"] = output == expected


def table(rows: list[dict[str, object]], args: argparse.Namespace) -> list[str]:
    alone = next((float(r["small_s"]) for r in rows if r["case"] == "alone"),  # type: ignore[arg-type]
                 None)
    lines = ["| case | small job s | over alone | goal s | big job s | tasks taken back | "
             "lost / duplicate records (small; big) | output each item once |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        small = float(row["small_s"])  # type: ignore[arg-type]
        ratio = f"{small / alone:.2f}" if alone else "-"
        goal = "-"
        if alone and row["case"] == "equal":
            goal = f"{3 * alone + args.issue_ahead:.1f}"
        elif alone and row["case"] == "higher":
            goal = f"{1.5 * alone + 2:.1f}"
        big = "-" if row["big_s"] is None else f"{float(row['big_s']):.1f}"  # type: ignore[arg-type]
        losses = f"{row['small_lost']} / {row['small_dups']}"
        if "big_lost" in row:
            losses += f"; {row['big_lost']} / {row['big_dups']}"
        exact = all(v for k, v in row.items() if k.endswith("_exact"))
        lines.append(f"| {row['case']} | {small:.1f} | {ratio} | {goal} | {big} | "
                     f"{row['taken_back']} | {losses} | {exact} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=100_000, help="items of the big job")
    parser.add_argument("--small", type=int, default=500, help="items of the small job")
    parser.add_argument("--delay", type=float, default=5.0, help="s between the two submits")
    parser.add_argument("--ms", type=int, default=2, help="the workers' sim:ms per item")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=8, help="task partitions")
    parser.add_argument("--chunk", type=int, default=100, help="items per task")
    parser.add_argument("--issue-ahead", type=float, default=10.0,
                        help="the controller's issue_ahead_s (its default), for the goal")
    parser.add_argument("--cases", default="alone,equal,higher")
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="prio-") as tmp:
        broker = None if args.bootstrap else start_broker(Path(tmp) / "kafka")
        bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
        try:
            for name in args.cases.split(","):
                row = run_case(bootstrap, Path(tmp), name, args)
                print(row, flush=True)
                rows.append(row)
        finally:
            if broker is not None:
                broker.clean()
    print(f"\nat {source_version() or 'a copy outside git'}: big job {args.big} items, small "
          f"{args.small}, {args.delay:g} s apart; {args.workers} workers sim:ms={args.ms}, "
          f"{args.partitions} task partitions, tasks of {args.chunk} items\n")
    print("\n".join(table(rows, args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
