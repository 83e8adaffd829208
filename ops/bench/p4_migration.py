"""Benchmark P4: one of five workers 8x slower; a job's time with task migration over without.

Five `sim` workers (`sim:ms=10`, one of them `slow_factor=8`) take one job of `--items` items
in tasks of `--chunk` on `--partitions` task partitions, with no sysinfo app (so the pool
shares its partitions evenly and the controller estimates speeds from the results), each case
on a fresh topic prefix of one local broker, side by side in one run:

- `without`: the controller with `migration_slack = 0` (no migration): the slow worker's
  fifth of the partitions sets the job's time;
- `with`: the default migration settings: the slow worker's queued tasks are issued again
  elsewhere once its results have shown it 3x slower than its peers for 5 s, those it would
  finish at least 2 s later than a fast worker (`speculation_floor_s`).

Time runs from submission to COMPLETED; the fast-only time is what the four fast workers need
for the whole job. Every case audits the committed results (no item lost, no (task, attempt)
record twice; a migrated task's late attempt adds a record of its own) and the job's output
(each item once). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, audit
from failover_common import (
    Fleet,
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)

MS, SLOW_FACTOR, WORKERS = 10, 8, 5


def run_case(bootstrap: str, logdir: Path, name: str, migrate: bool, items: int,
             partitions: int, chunk: int) -> dict[str, object]:
    fleet = Fleet(bootstrap, partitions, logdir, f"p4-{name}")
    try:
        fleet.create_topics()
        extra = [] if migrate else ["--migration-slack", "0"]
        fleet.start("controller", "controller", *extra)
        names = [f"w{i}" for i in range(1, WORKERS + 1)]
        for worker in names:
            model = f"sim:ms={MS}" + (f",slow_after=0,slow_factor={SLOW_FACTOR}"
                                      if worker == "w1" else "")
            fleet.worker(worker, model, "--sysinfo-interval", "0")
        wait_for_group(fleet, names, timeout_s=300)
        reader = CommittedResults(fleet.config).start()
        listing = write_listing(logdir / f"{name}.txt", items, name)
        submitted = time.time()
        job = fleet.client.submit(f"sim:ms={MS}", [f"@{listing}"], chunk_size=chunk)
        job.wait(timeout_s=3600)
        seconds = time.time() - submitted
        reader.read_to_end()
        results = reader.snapshot()
        reader.stop()
        expected = [f"{name}-{i:07d}" for i in range(items)]
        check = audit(results, job.job_id, expected)
        output = sorted(str(line["item"]).rsplit("/", 1)[-1] for line in job.results())
        controller_log = fleet.log_path("controller").read_text(errors="replace")
        return {"case": name, "seconds": seconds,
                "migrated": len(re.findall(r"re-issued as attempt", controller_log)),
                "dropped": len(re.findall(r"duplicate result dropped", controller_log)),
                "lost": check["lost_items"], "duplicates": check["duplicate_records"],
                "output_exact": output == expected}
    finally:
        fleet.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4000)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=8, help="items per task")
    args = parser.parse_args(argv)
    fast_only = args.items / ((WORKERS - 1) * 1000 / MS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="p4-") as tmp:
        broker = start_broker(Path(tmp) / "kafka")
        try:
            for name, migrate in (("without", False), ("with", True)):
                row = run_case(broker.bootstrap, Path(tmp), name, migrate, args.items,
                               args.partitions, args.chunk)
                print(row, flush=True)
                rows.append(row)
        finally:
            broker.clean()
    without = float(rows[0]["seconds"])  # type: ignore[arg-type]
    lines = [f"P4 at {source_version()}: {args.items} items in tasks of {args.chunk} on "
             f"{args.partitions} task partitions; 5 workers sim:ms={MS}, one {SLOW_FACTOR}x "
             f"slower; the four fast ones alone: {fast_only:.1f} s", "",
             "| case | job s | over without | over fast-only | tasks re-issued | late results "
             "dropped | lost items / duplicate (task, attempt) records | output each item "
             "once |", "|---|---:|---:|---:|---:|---:|---|---|"]
    for row in rows:
        seconds = float(row["seconds"])  # type: ignore[arg-type]
        lines.append(f"| {row['case']} | {seconds:.1f} | {seconds / without:.2f} | "
                     f"{seconds / fast_only:.2f} | {row['migrated']} | {row['dropped']} | "
                     f"{row['lost']} / {row['duplicates']} | {row['output_exact']} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
