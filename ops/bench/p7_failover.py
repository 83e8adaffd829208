#!/usr/bin/env python3
"""Benchmark P7: how fast a worker pool recovers from each kind of worker fault.

One broker, one controller, three `sim:ms=N` workers (two dynamic members and one static
member, `--instance-id`); each fault hits a fresh job of `--job-items` items once 10 % of it
is done, and the job must then complete with no duplicate and no lost item. Fault kinds,
round-robin, `--repeats` times each:

* `sigterm`: clean leave (the worker commits what is in flight and sends LeaveGroup);
* `kill9`: SIGKILL; the group notices at the session timeout;
* `sigstop`: SIGSTOP until the partitions have moved, then SIGCONT (the zombie is fenced);
* `static-restart`: SIGKILL of the static member, then at once a replacement with the same
  `--instance-id`, which should get the partitions back without a rebalance.

Per fault, from the moment of the signal (epoch clock of this process; worker log stamps):
(a) detection: the first `revoked partitions` line of a survivor (static restart: the
replacement's first `assigned partitions` line); (b) every partition owned again: the first
moment the survivors (and replacement) together own all task partitions; (c) the first
committed result from a moved partition: when a read_committed reader sees a TaskResult,
not from the victim, for a task issued to one of the victim's partitions.

    .venv/bin/python ops/bench/p7_failover.py [--repeats 3] [--session-timeout-ms 6000]

Prints Markdown tables and the exact command; writes them to `--markdown` as well.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, TaskPlacements, audit
from failover_common import (
    Fleet,
    Ownership,
    first_full_ownership,
    owners_at,
    ownership_events,
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)
from p1_stack import BenchError

from inferstream.client.client import Job
from inferstream.jobs.errors import JobTimeoutError

KINDS = ("sigterm", "kill9", "sigstop", "static-restart")
STATIC_ID = "p7-static"
RESULTS_MD = Path(__file__).resolve().parent / "results" / "p7.md"
METHOD = """\
How long a worker pool takes to notice a worker fault, to own every task partition again, and
to commit the first result of a task the faulty worker had been given. Each fault hits a
fresh job (sim model, no CPU spent on inference); each job must then complete with no
duplicate (job, task, attempt) in `results` read with read_committed and no lost item.

* (a) detection: from the signal to the first `revoked partitions` log line of a surviving
  worker (the start of the rebalance); for a static restart, to the replacement's first
  `assigned partitions` line.
* (b) all partitions owned again: the first moment the survivors (and the replacement)
  together own every task partition (`assigned partitions` lines are logged after the
  partition's transactional producer is initialised and the committed offset is read).
* (c) first committed result from a moved partition: when the benchmark's read_committed
  reader sees a TaskResult, not from the victim, of a task issued to one of the victim's
  partitions (read from the task topic: paced tasks go where a worker has room, not where
  `task_partition` would put them; `finished_at` in the next column: when the worker
  finished that task).
* survivors rebalanced: whether any survivor revoked its partitions (for a static restart,
  "no" is the point of static membership).

Times come from this process's clock and the workers' log stamps (same host, ms resolution)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="faults of each kind")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--model", default="sim:ms=5")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=6, help="task topic partitions")
    parser.add_argument("--chunk-size", type=int, default=16, help="items per task")
    parser.add_argument("--job-items", type=int, default=12_000,
                        help="items of the job each fault hits (one job per fault)")
    parser.add_argument("--fault-at", type=float, default=0.1,
                        help="inject the fault when this fraction of the job is done")
    parser.add_argument("--observe-s", type=float, default=60.0,
                        help="give up on a measurement this long after the fault")
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "inferstream-bench-p7")
    parser.add_argument("--markdown", type=Path, default=RESULTS_MD,
                        help="write the tables here ('-' for nowhere)")
    return parser.parse_args(argv)


@dataclass
class Trial:
    """One fault and what it cost; times in seconds after the fault, None if never seen."""

    kind: str
    repeat: int
    victim: str
    victim_partitions: list[int]
    replacement: str | None = None
    detected_s: float | None = None
    owned_s: float | None = None
    first_result_s: float | None = None
    first_finished_s: float | None = None
    survivors_rebalanced: bool = False
    job_id: str = ""
    #: items of the job committed from other partitions between (b) and (c)
    elsewhere_items: int | None = None
    duplicates: int | None = None
    lost_items: int | None = None
    notes: list[str] = field(default_factory=list)


class FailoverBench:
    """The pool under test: which workers are members, and how to hurt and heal it."""

    def __init__(self, args: argparse.Namespace, fleet: Fleet, reader: CommittedResults,
                 placements: TaskPlacements, listing: Path) -> None:
        self.args = args
        self.fleet = fleet
        self.reader = reader
        self.placements = placements
        self.listing = listing
        self.items = listing.read_text().split()
        self.dynamic: list[str] = []
        self.static = ""
        self.broken = False
        self._started = 0

    @property
    def members(self) -> list[str]:
        return [*self.dynamic, self.static]

    def _worker(self, static: bool) -> str:
        self._started += 1
        name = f"{'s' if static else 'd'}{self._started}"
        extra = ["--instance-id", STATIC_ID] if static else []
        self.fleet.worker(name, self.args.model, "--session-timeout-ms",
                          str(self.args.session_timeout_ms), "--heartbeat-interval-ms",
                          str(self.args.heartbeat_interval_ms), *extra)
        return name

    def start(self) -> None:
        self.fleet.start("controller", "controller")
        self.dynamic = [self._worker(False), self._worker(False)]
        self.static = self._worker(True)
        wait_for_group(self.fleet, self.members)

    def submit(self, trial: Trial) -> Job:
        """A fresh job; returns once `--fault-at` of its items have committed results."""
        job = self.fleet.client.submit(self.args.model, [f"@{self.listing}"],
                                       chunk_size=self.args.chunk_size)
        trial.job_id = job.job_id
        deadline = time.monotonic() + 120
        while self.reader.done_items(job.job_id) < self.args.fault_at * self.args.job_items:
            if time.monotonic() > deadline:
                raise BenchError(f"job {job.job_id} made no progress")
            time.sleep(0.05)
        return job

    def finish(self, trial: Trial, job: Job) -> None:
        """Wait for the trial's job to complete; count its duplicates and lost items."""
        try:
            job.wait(timeout_s=300)
        except JobTimeoutError:
            trial.notes.append("job not completed within 300 s: trials stopped here")
            self.broken = True
        self.reader.read_to_end()
        found = audit(self.reader.snapshot(), job.job_id, self.items)
        trial.duplicates, trial.lost_items = found["duplicate_records"], found["lost_items"]

    # -- one fault ------------------------------------------------------------------------
    def trial(self, kind: str, repeat: int) -> Trial:
        wait_for_group(self.fleet, self.members)
        victim = self.static if kind == "static-restart" else self.dynamic[0]
        owned = owners_at(ownership_events(self.fleet, self.members), time.time())
        trial = Trial(kind, repeat, victim, sorted(owned.get(victim, frozenset())))
        job = self.submit(trial)
        proc = self.fleet.procs[victim]
        fault_at = time.time()
        proc.send_signal({"sigterm": signal.SIGTERM, "sigstop": signal.SIGSTOP}.get(
            kind, signal.SIGKILL))
        if kind == "static-restart":
            proc.wait(timeout=30)
            trial.replacement = self._worker(True)
        self._observe(trial, fault_at)
        self._heal(trial)
        self.finish(trial, job)
        return trial

    def _observe(self, trial: Trial, fault_at: float) -> None:
        """Fill in (a), (b), (c) from the logs and the reader, up to `--observe-s`."""
        survivors = {m for m in self.members if m != trial.victim}
        owners = survivors | ({trial.replacement} if trial.replacement else set())
        moved = set(trial.victim_partitions)
        n = self.fleet.config.task_partitions_for()
        deadline = time.monotonic() + self.args.observe_s
        while time.monotonic() < deadline:
            history = ownership_events(self.fleet, sorted(owners))
            detected = self._detected(trial, history, survivors, fault_at)
            owned = first_full_ownership(history, owners, n, fault_at)
            seen = self.reader.snapshot()
            firsts = [r for r in seen if r.seen_at > fault_at and r.worker != trial.victim
                      and self.placements.partition_of(r) in moved]
            trial.detected_s = None if detected is None else detected - fault_at
            trial.owned_s = None if owned is None else owned - fault_at
            if detected is not None and owned is not None and firsts:
                first_seen = min(r.seen_at for r in firsts)
                trial.first_result_s = first_seen - fault_at
                trial.first_finished_s = min(r.finished_at for r in firsts) - fault_at
                trial.elsewhere_items = sum(len(r.names) for r in seen
                                            if owned < r.seen_at < first_seen)
                return
            time.sleep(0.1)
        trial.notes.append(f"not everything seen within {self.args.observe_s:.0f}s")

    @staticmethod
    def _detected(trial: Trial, history: list[Ownership], survivors: set[str],
                  fault_at: float) -> float | None:
        """(a): a survivor's first revocation, or the replacement's first assignment."""
        events = [e for e in history if e.t > fault_at]
        revoked = [e.t for e in events if e.kind == "revoked" and e.member in survivors]
        trial.survivors_rebalanced = bool(revoked)
        if trial.replacement:
            back = [e.t for e in events
                    if e.member == trial.replacement and e.kind == "assigned" and e.partitions]
            return back[0] if back else None
        return revoked[0] if revoked else None

    def _heal(self, trial: Trial) -> None:
        """Back to two dynamic members and one static member."""
        proc = self.fleet.procs[trial.victim]
        if trial.kind == "sigstop":
            proc.send_signal(signal.SIGCONT)
            return
        code = proc.wait(timeout=120)
        if trial.kind == "sigterm" and code != 0:
            trial.notes.append(f"SIGTERMed worker exited {code}")
        if trial.kind == "static-restart":
            assert trial.replacement is not None  # noqa: S101
            self.static = trial.replacement
        else:
            self.dynamic = [*self.dynamic[1:], self._worker(False)]

    def zombie_fencing(self, victims: list[str]) -> int:
        """How often the resumed SIGSTOP victims found themselves fenced."""
        return sum(self.fleet.log_path(v).read_text(errors="replace").count("fenced by a new")
                   for v in victims)


# -- report ---------------------------------------------------------------------------------
def _median(values: list[float | None]) -> float | None:
    seen = [v for v in values if v is not None]
    return statistics.median(seen) if seen else None


def _cell(value: float | None, timeout_s: float) -> str:
    if value is None:
        return "not seen"
    return f"{value:.2f} s ({value / timeout_s:.2f}x)"


def summary_table(trials: list[Trial], timeout_s: float) -> str:
    lines = [
        "| fault | (a) detection | (b) all partitions owned again | "
        "(c) first committed result from a moved partition | (c) by worker `finished_at` | "
        "survivors rebalanced | runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        runs = [t for t in trials if t.kind == kind]
        if not runs:
            continue
        cells = [_cell(_median([getattr(t, k) for t in runs]), timeout_s)
                 for k in ("detected_s", "owned_s", "first_result_s", "first_finished_s")]
        rebalanced = sum(t.survivors_rebalanced for t in runs)
        lines.append(f"| {kind} | {' | '.join(cells)} | {rebalanced}/{len(runs)} | "
                     f"{len(runs)} |")
    return "\n".join(lines)


def trials_table(trials: list[Trial]) -> str:
    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = ["| # | fault | victim (partitions) | replacement | (a) s | (b) s | (c) s | "
             "(c) finished_at s | items done elsewhere between (b) and (c) | "
             "survivors rebalanced | duplicates / lost | notes |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|---|---|---|"]
    for i, t in enumerate(trials, 1):
        lines.append(
            f"| {i} | {t.kind} | {t.victim} {t.victim_partitions} | {t.replacement or '-'} | "
            f"{num(t.detected_s)} | {num(t.owned_s)} | {num(t.first_result_s)} | "
            f"{num(t.first_finished_s)} | {t.elsewhere_items} | "
            f"{'yes' if t.survivors_rebalanced else 'no'} | "
            f"{t.duplicates} / {t.lost_items} | {'; '.join(t.notes)} |")
    return "\n".join(lines)


def report(args: argparse.Namespace, trials: list[Trial], extra: dict[str, Any]) -> str:
    timeout_s = args.session_timeout_ms / 1000
    command = shlex.join(["python", "ops/bench/p7_failover.py", *sys.argv[1:]])
    return "\n".join([
        f"Medians of {args.repeats} faults per kind; seconds after the signal and, in "
        f"brackets, multiples of the session timeout ({args.session_timeout_ms} ms).",
        "",
        summary_table(trials, timeout_s),
        "",
        "Every fault, in the order injected:",
        "",
        trials_table(trials),
        "",
        f"Command: `{command}` (1 broker, 1 controller, 3 workers `{args.model}`: 2 dynamic, "
        f"1 static; {args.partitions} task partitions, chunk {args.chunk_size}, heartbeat "
        f"{args.heartbeat_interval_ms} ms; {os.cpu_count()} shared cores). One job of "
        f"{args.job_items} items per fault, injected when {args.fault_at:.0%} of it is done. "
        f"Code: {extra['source']}. Committed results read: {extra['records']}; duplicate (job, "
        f"task, attempt) records: {extra['duplicates']}; lost items: {extra['lost_items']}; "
        f"fenced-commit warnings of resumed SIGSTOP victims: {extra['zombie_fenced']}.",
    ])


def run(args: argparse.Namespace) -> tuple[list[Trial], dict[str, Any]]:
    args.workdir.mkdir(parents=True, exist_ok=True)
    logdir = args.workdir / "logs"
    shutil.rmtree(logdir, ignore_errors=True)  # those of an earlier run
    logdir.mkdir()
    listing = write_listing(args.workdir / "items.txt", args.job_items, "p7")
    broker = start_broker(args.workdir / "kafka")
    source = source_version()
    trials: list[Trial] = []
    try:
        fleet = Fleet(broker.bootstrap, args.partitions, logdir, "p7")
        fleet.create_topics()
        reader = CommittedResults(fleet.config).start()
        placements = TaskPlacements(fleet.config).start()
        bench = FailoverBench(args, fleet, reader, placements, listing)
        try:
            bench.start()
            for repeat in range(1, args.repeats + 1):
                for kind in args.kinds:
                    if not bench.broken:
                        trials.append(bench.trial(kind, repeat))
                        print(json.dumps(asdict(trials[-1])), file=sys.stderr, flush=True)
            extra = {"records": len(reader.snapshot()), "source": source,
                "duplicates": sum(t.duplicates or 0 for t in trials),
                "lost_items": sum(t.lost_items or 0 for t in trials),
                "zombie_fenced": bench.zombie_fencing(
                    [t.victim for t in trials if t.kind == "sigstop"]),
                "logs": str(logdir)}
        finally:
            fleet.stop_all()
            reader.stop()
            placements.stop()
    finally:
        broker.clean()
    if source_version() != source:
        extra["source"] = f"{source}, then {source_version()} (src/ changed during the run)"
    return trials, extra


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        trials, extra = run(args)
    except BenchError as exc:
        print(f"p7: {exc}", file=sys.stderr)
        return 1
    (args.workdir / "p7-results.json").write_text(
        json.dumps({"trials": [asdict(t) for t in trials], **extra}, indent=2))
    text = report(args, trials, extra)
    print(text)
    if str(args.markdown) != "-":
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(f"# P7: worker failover\n\n{METHOD}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
