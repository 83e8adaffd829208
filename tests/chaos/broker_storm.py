"""Broker storm: kill -9 and restart brokers again and again under back-to-back jobs.

    python -m tests.chaos.broker_storm [--minutes 20] [--seed 2] [--dir DIR]

The seeded scenario kills one broker per run; a controller hang that needs the group
coordinator's broker to die at the wrong moment of a transaction showed up there about once in
five runs, and here within 20 kills (librdkafka#5456, see `kafka.call_with_deadline`).
Three `sim:ms=5` workers run 60,000-item jobs one after another while a random broker is killed
every 15-30 s and restarted 2-8 s later. Fails when the controller's progress stops for longer
than --stall-s, when a job ends other than COMPLETED, or when a job's output is not exactly one
line per item, as `results` reads it after the job and as `submit --output` writes it during
the job (`jobs.follow.OutputFollower`, reading through the kills). Prints each kill, each job
and the controller's recoveries from stuck calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.jobs.follow import OutputFollower
from inferstream.kafka.topics import ensure_topics
from tests.chaos.fleets import ChaosCluster, ClusterUnavailableError, WorkerFleet
from tests.chaos.progress import ProgressFollower
from tests.integration.conftest import Processes

ITEMS = 60_000
MODEL = "sim:ms=5"


@dataclass
class StormReport:
    kills: int = 0
    jobs: list[tuple[str, str, int]] = field(default_factory=list)  # (id, state, output lines)
    longest_stall_s: float = 0.0
    problems: list[str] = field(default_factory=list)


def _finish_job(config: Config, follower: ProgressFollower, output: OutputFollower,
                report: StormReport) -> None:
    """Check the job's output as `results` reads it after the job and as `submit --output`
    wrote it while the job ran through the kills: one line per item, the same lines."""
    status = follower.status
    state = status.state if status else "unseen"
    items = [line["item"] for line in Client(config).job(follower.job_id).results()]
    report.jobs.append((follower.job_id, state, len(items)))
    print(f"job {follower.job_id}: {state}, {len(items)} output lines", flush=True)
    with output:
        if status is None or state != "COMPLETED" or len(items) != ITEMS:
            report.problems.append(f"job {follower.job_id} ended {state} with "
                                   f"{len(items)}/{ITEMS} lines")
            return
        try:
            output.finish(status.total_tasks, status.home_partition)
        except Exception as exc:  # a read that failed for good: the storm's finding
            report.problems.append(f"job {follower.job_id}: submit's output failed: {exc!r}")
            return
    written = [json.loads(line)["item"] for line in Path(output.path).read_text().splitlines()]
    Path(output.path).unlink()
    if written != items:
        report.problems.append(f"job {follower.job_id}: submit's output written during the job "
                               f"({len(written)} lines) differs from `results`")


def storm(directory: Path, seed: int, minutes: float, stall_s: float) -> StormReport:
    rng = random.Random(seed)
    report = StormReport()
    cluster = ChaosCluster(directory / "kafka")
    procs: Processes | None = None
    try:
        cluster.start()
        config = Config(bootstrap_servers=cluster.bootstrap, topic_prefix="storm.",
                        partitions=8, task_partitions=8, replication_factor=3)
        assert ensure_topics(config).ok
        procs = Processes(config, directory / "logs")
        procs.start("controller", "controller", "--idle-exit", "900")
        fleet = WorkerFleet(procs, MODEL, ["--session-timeout-ms", "6000", "--idle-exit", "900"])
        for _ in range(3):
            fleet.add()
        listing = directory / "items.txt"
        listing.write_text("\n".join(f"item-{i:06d}" for i in range(ITEMS)) + "\n")

        def submit() -> tuple[ProgressFollower, OutputFollower]:
            job = Client(config).submit(MODEL, [f"@{listing}"], chunk_size=16)
            output = OutputFollower(config, job.job_id, str(directory / f"{job.job_id}.jsonl"))
            output.start()
            return ProgressFollower(config, job.job_id).start(), output

        follower, output = submit()
        started = last_change = time.monotonic()
        next_kill, last_done = started + 25, -1
        while time.monotonic() - started < minutes * 60:
            now = time.monotonic()
            if follower.done_items != last_done:
                last_done, last_change = follower.done_items, now
            report.longest_stall_s = max(report.longest_stall_s, now - last_change)
            if follower.status is not None and follower.status.finished:
                follower.stop()
                _finish_job(config, follower, output, report)
                (follower, output), last_done, last_change = submit(), -1, time.monotonic()
            if now - last_change > stall_s:
                report.problems.append(f"no progress for {stall_s:.0f}s at {last_done} items "
                                       f"of job {follower.job_id}")
                procs.dump_stacks()
                break
            if now >= next_kill and not cluster.restarting:
                broker = rng.randint(1, cluster.brokers)
                cluster.kill(broker)
                report.kills += 1
                print(f"t={now - started:5.0f}s kill -9 broker-{broker} at {last_done} items",
                      flush=True)
                time.sleep(rng.uniform(2, 8))
                cluster.begin_restart(broker)
                next_kill = time.monotonic() + rng.uniform(15, 30)
            for broker, code, _ in cluster.finished_restarts():
                if code != 0:
                    report.problems.append(f"broker-{broker} did not restart (exit {code})")
            time.sleep(0.2)
        follower.stop()
        output.close()
    finally:
        if procs is not None:
            procs.stop_all()
        cluster.keep_logs(directory / "logs")
        cluster.clean()
    log = (directory / "logs" / "controller.log").read_text(errors="replace")
    print(f"controller gave up on a stuck call {log.count('transaction stuck')} times; "
          f"transaction failures {log.count('transaction failed')}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.broker_storm",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--stall-s", type=float, default=60.0,
                        help="fail when the job's progress stops this long")
    parser.add_argument("--dir", type=Path, default=None, help="default: a new temporary dir")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("inferstream.librdkafka").setLevel(logging.CRITICAL)  # brokers dying
    directory = args.dir or Path(tempfile.mkdtemp(prefix=f"storm-{args.seed}-"))
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    print(f"storm: seed={args.seed} minutes={args.minutes:g} dir={directory}", flush=True)
    try:
        report = storm(directory, args.seed, args.minutes, args.stall_s)
    except ClusterUnavailableError as exc:
        print(f"storm: {exc}", file=sys.stderr)
        return 3
    print(f"storm: {report.kills} broker kills, {len(report.jobs)} jobs finished, longest "
          f"progress stall {report.longest_stall_s:.1f}s", flush=True)
    for problem in report.problems:
        print(f"FAILED: {problem}", flush=True)
    print(f"logs: {directory / 'logs'}", flush=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
