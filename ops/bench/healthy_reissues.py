"""Tasks re-issued on a healthy pool: how much of a job the controller's migration speculates on.

One worker process with `--members 8` (eight group members of equal speed, no sysinfo app,
so the controller learns their speeds from their results) on `--partitions` task partitions
of one local broker takes one job per case, `sim:ms=M` for each M of `--ms`, in tasks of
`--chunk` items. Nothing is slow or fails, so every task issued as attempt 2 or later is
speculation on noise. Each case runs once per source tree of `--src` (none: the tree this
script is in), alternated, each on its own topic prefix; a tree's processes run with
PYTHONPATH at its `src`. Re-issued tasks are counted from the controller's log ("re-issued as
attempt"), with the results of superseded attempts it dropped, the job's tasks from its
COMPLETED event; the load average is read after each run.
Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from failover_common import Fleet, source_version, start_broker, write_listing

MEMBERS = 8
HERE = Path(__file__).resolve().parents[2] / "src"


class TreeFleet(Fleet):
    """A fleet whose processes import inferstream from the source tree `src`."""

    def __init__(self, src: Path, bootstrap: str, partitions: int, logdir: Path,
                 tag: str) -> None:
        super().__init__(bootstrap, partitions, logdir, tag)
        self.src = src

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "PYTHONPATH": str(self.src)}


@dataclass(frozen=True)
class Row:
    """One case's run on one source tree."""

    src: Path
    ms: int
    items: int
    seconds: float
    tasks: int
    reissued: int
    dropped: int
    reason: str
    load: float


def run_case(bootstrap: str, logdir: Path, src: Path, ms: int, items: int, partitions: int,
             chunk: int) -> Row:
    tag = f"healthy-{abs(hash(str(src))) % 1000:03d}-ms{ms}"
    fleet = TreeFleet(src, bootstrap, partitions, logdir, tag)
    try:
        fleet.create_topics()
        fleet.start("controller", "controller")
        fleet.worker("w", f"sim:ms={ms}", "--members", str(MEMBERS))
        fleet.wait_for_members(MEMBERS, 300, "controller", "w")
        listing = write_listing(logdir / f"{tag}.txt", items, tag)
        submitted = time.time()
        status = fleet.client.submit(f"sim:ms={ms}", [f"@{listing}"],
                                     chunk_size=chunk).wait(timeout_s=3600)
        seconds = time.time() - submitted
        controller_log = fleet.log_path("controller").read_text(errors="replace")
        reasons = re.findall(r"task \d+ (.*?): re-issued as attempt", controller_log)
        dropped = len(re.findall(r"duplicate result dropped", controller_log))
        return Row(src, ms, items, seconds, status.total_tasks or 0, len(reasons), dropped,
                   reasons[0] if reasons else "", os.getloadavg()[0])
    finally:
        fleet.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="0:150000,1:60000,20:8000",
                        help="cases as MS:ITEMS, comma-separated")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=32, help="items per task")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the processes' logs in this folder")
    parser.add_argument("--src", type=Path, action="append", default=[],
                        help="a source tree to run (its src folder); repeat to compare")
    args = parser.parse_args(argv)
    trees = args.src or [HERE]
    cases = [(int(ms), int(items)) for ms, items in
             (case.split(":") for case in args.ms.split(","))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="healthy-") as tmp:
        broker = start_broker(Path(tmp) / "kafka")
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        try:
            for ms, items in cases:
                for src in trees:
                    row = run_case(broker.bootstrap, logs, src, ms, items, args.partitions,
                                   args.chunk)
                    print(row, flush=True)
                    rows.append(row)
        finally:
            broker.clean()
    lines = [f"healthy pool at {source_version()}: one worker process, --members {MEMBERS}, "
             f"{args.partitions} task partitions, tasks of {args.chunk}", "",
             "| src | model | items | job s | items/s | tasks | re-issued | share | late results "
             "dropped | load |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        share = row.reissued / row.tasks if row.tasks else 0.0
        lines.append(f"| {row.src} | sim:ms={row.ms} | {row.items} | {row.seconds:.1f} | "
                     f"{row.items / row.seconds:.0f} | {row.tasks} | {row.reissued} | "
                     f"{share:.2%} | {row.dropped} | {row.load:.1f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
