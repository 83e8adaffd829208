"""A replayable chaos scenario: one job through a 3-broker cluster while things break.

    python -m tests.chaos.scenario --seed 7 --items 20000 [--workers 4] [--ms 2] [--dir DIR]
                                   [--controllers 2] [--faults KIND,KIND,...]
                                   [--security plaintext|sasl_ssl|ssl]

It starts a 3-broker KRaft cluster (RF 3, min ISR 2; with `--security sasl_ssl` or `ssl`,
each role runs as its own user holding only the ACLs `inferstream acls` prints for it), two
controller replicas and `--workers` workers on a `sim:` model, submits one job, and while the
job runs injects the faults of a schedule drawn from `random.Random(seed)` at fractions of
the job's done items (kill -9
workers, which are replaced; SIGSTOP a worker past its session timeout, then SIGCONT; kill -9
a broker and restart it; add two workers; SIGTERM one; kill -9 the controller replica that
owns the job, replaced by a third; SIGSTOP the owning replica past its session timeout, then
SIGCONT; a worker 8x slower than the others joins), or with `--faults` those kinds in that
order at even fractions (`tests.chaos.schedule_runs`). `--faults pause-broker` also hangs a
broker (SIGSTOP for a seeded 8-50 s, then SIGCONT), a kind no drawn schedule holds, so that a
seed's schedule stays what it was. Then it checks "exactly one result per
item" with the independent verifier (`tests.chaos.verifier`), and that the job's final counts
equal its output. The same seed gives the same schedule, victims and durations. Process logs
stay in the scenario directory.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from inferstream.client.client import Client, JobStatus
from inferstream.config import Config
from inferstream.kafka.settings import partition_for
from inferstream.kafka.topics import ensure_topics
from tests.chaos.diagnose import render_evidence, source_fingerprint
from tests.chaos.faults import KINDS, FaultInjector, FaultSchedule, Timeline, fault_kinds
from tests.chaos.fleets import ChaosCluster, ClusterUnavailableError, ControllerFleet, WorkerFleet
from tests.chaos.progress import ProgressFollower
from tests.chaos.verifier import ResultsReader, VerificationReport, verify
from tests.integration.conftest import Processes

__all__ = ["ClusterUnavailableError", "ScenarioOptions", "ScenarioResult", "run_scenario"]


#: How far behind its place in the job (a fraction of the items) a fault stops waiting for
#: joins (FaultInjector.settled): about one step of the schedule.
OVERDUE = 0.05


@dataclass(frozen=True)
class ScenarioOptions:
    seed: int
    items: int = 20_000
    workers: int = 4
    ms: float = 10.0
    worker_kills: int = 2
    partitions: int = 8
    chunk_size: int = 16
    session_timeout_ms: int = 6_000
    controllers: int = 2
    faults: tuple[str, ...] = ()  # a fixed schedule (FaultSchedule.spread); empty: drawn
    #: the cluster's `--security`; secured, each role runs as its own least-privilege user
    security: str = "plaintext"
    directory: Path | None = None
    #: give up waiting for the job after this long from submission
    job_timeout_s: float = 900.0
    #: or once no item was done for this long with no fault still in progress
    stall_timeout_s: float = 150.0

    @property
    def model(self) -> str:
        return f"sim:ms={self.ms:g}"

    def replay(self) -> str:
        fixed = f" --faults {','.join(self.faults)}" if self.faults else ""
        secured = f" --security {self.security}" if self.security != "plaintext" else ""
        return (f"python -m tests.chaos.scenario --seed {self.seed} --items {self.items} "
                f"--workers {self.workers} --ms {self.ms:g} --kills {self.worker_kills} "
                f"--controllers {self.controllers}{fixed}{secured}")


@dataclass
class ScenarioResult:
    options: ScenarioOptions
    directory: Path
    schedule: FaultSchedule
    timeline: Timeline
    status: JobStatus | None = None
    job_seconds: float = 0.0
    report: VerificationReport | None = None
    during: VerificationReport | None = None
    not_injected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    evidence: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        opts = self.options
        state = self.status.state if self.status else "never seen"
        done = self.status.done_items if self.status else 0
        lines = [
            f"=== chaos scenario seed={opts.seed} items={opts.items} workers={opts.workers} "
            f"controllers={opts.controllers} model={opts.model} partitions={opts.partitions} "
            f"session-timeout={opts.session_timeout_ms}ms security={opts.security} ===",
            f"schedule: {self.schedule.render()}",
            "timeline:", self.timeline.render(),
            f"job: {state} done={done}/{opts.items} after {self.job_seconds:.1f}s",
        ]
        if self.during is not None:
            lines.append(f"during-run reader: records={self.during.records} "
                         f"duplicates={self.during.duplicates}")
        if self.report is not None:
            lines.append(self.report.render())
        if self.evidence:
            lines += ["evidence:", *(f"  {line}" for line in self.evidence.splitlines())]
        lines += [f"WARNING: {w}" for w in self.warnings]
        lines += [f"FAILED: {p}" for p in self.problems]
        lines += [f"replay: {opts.replay()}", f"logs: {self.directory / 'logs'}"]
        return "\n".join(lines)


def _names(items: int) -> list[str]:
    return [f"item-{i:06d}" for i in range(items)]


def _drive(options: ScenarioOptions, result: ScenarioResult, follower: ProgressFollower,
           injector: FaultInjector) -> None:
    """Inject the scheduled faults as the job progresses; return once it is final or stuck."""
    pending = list(result.schedule.faults)
    started = last_change = last_print = time.monotonic()
    last_done = -1
    while True:
        status = follower.status
        if status is not None and status.finished:
            break
        now = time.monotonic()
        if follower.done_items != last_done:
            last_done, last_change = follower.done_items, now
        if now - last_print >= 15:
            last_print = now
            injector.timeline.note(f"progress {status.state if status else 'no event yet'}")
        behind = follower.done_items / options.items - pending[0].at_fraction if pending else 0
        if pending and behind >= 0 and injector.settled(overdue=behind >= OVERDUE):
            injector.inject(pending.pop(0).kind)
        injector.run_due()
        if now - started > options.job_timeout_s:
            result.problems.append(f"job not finished after {options.job_timeout_s:.0f}s")
            break
        if now - last_change > options.stall_timeout_s and not injector.pending:
            result.problems.append(f"job stalled: no progress for {options.stall_timeout_s:.0f}s "
                                   f"at {last_done}/{options.items} items")
            break
        time.sleep(0.2)
    result.job_seconds = time.monotonic() - started
    result.not_injected = [f"{f.kind}@{100 * f.at_fraction:.0f}%" for f in pending]
    injector.timeline.add("job " + (status.state if status else "unseen").lower())
    injector.run_due(everything=True)  # resume paused workers, restart the broker
    deadline = time.monotonic() + 180
    while injector.pending and time.monotonic() < deadline:
        injector.run_due()
        time.sleep(0.2)


def _verify(config: Config, job_id: str, options: ScenarioOptions, result: ScenarioResult,
            during: ResultsReader) -> None:
    names = _names(options.items)
    if not during.read_to_end(timeout_s=120):
        result.warnings.append("during-run reader did not reach the end of every partition")
    after = ResultsReader(config, name="results-verifier-after")
    try:
        if not after.read_to_end(timeout_s=120):
            result.problems.append("after-run reader did not reach the end of every partition")
        records = after.snapshot()
        undecodable = after.undecodable
    finally:
        after.close()
    job = Client(config).job(job_id)
    output = list(job.results())
    later = job.progress()
    ok_lines = sum(1 for line in output if line["status"] == "ok")
    counted = (later.done_items, later.ok_items, later.error_items)
    if counted != (len(output), ok_lines, len(output) - ok_lines):
        result.problems.append(f"the job's counts {counted} differ from its output "
                               f"({len(output)} lines, {ok_lines} ok)")
    if result.status is None or later.state != result.status.state:
        result.warnings.append(f"the job was {later.state} with {later.done_items} items done "
                               "at verification time, after the wait above had ended")
    result.report = verify(job_id, names, records, output, undecodable)
    result.during = verify(job_id, names, during.snapshot(), None, during.undecodable)
    seen_after = {(r.partition, r.offset) for r in records}
    vanished = [r for r in during.snapshot() if (r.partition, r.offset) not in seen_after]
    if vanished:
        result.problems.append(f"{len(vanished)} records read during the run are gone after it")
    if result.during.duplicates:
        result.problems.append(f"during-run reader saw {result.during.duplicates} duplicates")
    result.problems += result.report.problems()


def _check_outcome(result: ScenarioResult, fleet: WorkerFleet, controllers: ControllerFleet,
                   follower: ProgressFollower) -> None:
    status = result.status
    if status is None or status.state != "COMPLETED":
        result.problems.append(f"job not completed: {status.state if status else 'no event'}"
                               + (f" ({status.reason})" if status and status.reason else ""))
    if result.not_injected:
        result.problems.append(f"job ended before these faults: {result.not_injected}")
    for name, code in fleet.unexpected_exits().items():
        result.warnings.append(f"worker {name} exited by itself with code {code}")
    for name, code in fleet.exit_codes.items():
        if code not in (0, -signal.SIGKILL):
            result.warnings.append(f"worker {name} exited with code {code} after SIGTERM")
    for name, code in controllers.unexpected_exits().items():
        result.warnings.append(f"controller {name} exited by itself with code {code}")
    if follower.read_errors:
        result.warnings.append(f"job-events read errors: {follower.read_errors[:3]}")


def run_scenario(options: ScenarioOptions) -> ScenarioResult:
    """Run the whole scenario; cleans up every process and the cluster before returning.

    Raises ClusterUnavailableError when the brokers cannot start.
    """
    directory = options.directory or Path(tempfile.mkdtemp(prefix=f"chaos-{options.seed}-"))
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    rng = random.Random(options.seed)
    follower: ProgressFollower | None = None
    timeline = Timeline(lambda: (follower.done_items if follower else 0, options.items))
    schedule = (FaultSchedule.spread(options.faults) if options.faults
                else FaultSchedule.from_seed(rng, options.worker_kills))
    result = ScenarioResult(options, directory, schedule, timeline)
    print(f"chaos: seed={options.seed} dir={directory}\nchaos: schedule "
          f"{result.schedule.render()}\nchaos: replay with `{options.replay()}`", flush=True)
    source = source_fingerprint()
    cluster = ChaosCluster(directory / "kafka", security=options.security)
    procs: Processes | None = None
    fleet: WorkerFleet | None = None
    controllers: ControllerFleet | None = None
    during: ResultsReader | None = None
    try:
        timeline.add("cluster ready", cluster.start())
        config = cluster.connect(Config(
            topic_prefix=f"chaos{options.seed}.", partitions=options.partitions,
            task_partitions=options.partitions, replication_factor=3))
        topics = ensure_topics(config)
        assert topics.ok, topics.mismatched
        cluster.grant(config, "controller", "worker", "client")
        procs = Processes(config, directory / "logs", cluster.principals("controller", "worker"))
        controllers = ControllerFleet(procs, ["--idle-exit", "900"])
        for _ in range(options.controllers):
            controllers.add()
        fleet = WorkerFleet(procs, options.model, [
            "--session-timeout-ms", str(options.session_timeout_ms), "--idle-exit", "900"])
        for _ in range(options.workers):
            fleet.add()
        listing = directory / "items.txt"
        listing.write_text("\n".join(_names(options.items)) + "\n")
        during = ResultsReader(config, name="results-verifier-during").start()
        job = Client(cluster.connect(config, "client")).submit(
            options.model, [f"@{listing}"], chunk_size=options.chunk_size)
        timeline.add("job submitted", job.job_id)
        follower = ProgressFollower(config, job.job_id).start()
        injector = FaultInjector(rng, cluster, fleet, timeline, options.session_timeout_ms / 1000,
                                 controllers, partition_for(job.job_id, options.partitions))
        _drive(options, result, follower, injector)
        result.status = follower.status
        _verify(config, job.job_id, options, result, during)
        _check_outcome(result, fleet, controllers, follower)
        result.evidence = render_evidence(config, config.worker_group(), directory / "logs")
        if source_fingerprint() != source:
            result.warnings.append("src/inferstream changed during the run: processes started "
                                   "at different times may have run different code")
    except BaseException as exc:
        print(f"chaos: aborted ({type(exc).__name__}: {exc}); logs in {directory / 'logs'}",
              flush=True)
        result.problems.append(f"aborted: {type(exc).__name__}")
        raise
    finally:
        _clean_up(result, cluster, procs, fleet, during, follower, controllers)
    print(result.render(), flush=True)
    return result


def _clean_up(result: ScenarioResult, cluster: ChaosCluster, procs: Processes | None,
              fleet: WorkerFleet | None, during: ResultsReader | None,
              follower: ProgressFollower | None, controllers: ControllerFleet | None) -> None:
    if follower is not None:
        follower.stop()
    if during is not None:
        during.close()
    if fleet is not None:
        fleet.resume_all()
    if controllers is not None:
        controllers.resume_all()
    if procs is not None:
        if not result.ok:
            procs.dump_stacks()  # where a stalled process waits, for the logs kept below
        procs.stop_all()
    if not result.ok or result.status is None:
        cluster.keep_logs(result.directory / "logs")
    cluster.clean()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.scenario",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--ms", type=float, default=10.0, help="sim model time per item")
    parser.add_argument("--kills", type=int, default=2, help="worker kill -9s")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--session-timeout-ms", type=int, default=6_000)
    parser.add_argument("--controllers", type=int, default=2, help="controller replicas")
    parser.add_argument("--faults", type=fault_kinds, default=(),
                        help=f"a fixed schedule, in this order: some of {','.join(KINDS)}")
    parser.add_argument("--security", choices=("plaintext", "sasl_ssl", "ssl"),
                        default="plaintext", help="the cluster's; secured, each role runs as "
                        "its own user holding only its ACLs")
    parser.add_argument("--dir", type=Path, default=None, help="default: a new temporary dir")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("inferstream.librdkafka", "tests.chaos.librdkafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)  # brokers going away, on purpose
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    options = ScenarioOptions(seed=seed, items=args.items, workers=args.workers, ms=args.ms,
                              worker_kills=args.kills, partitions=args.partitions,
                              session_timeout_ms=args.session_timeout_ms,
                              controllers=args.controllers, faults=args.faults,
                              security=args.security, directory=args.dir)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = run_scenario(options)
    except ClusterUnavailableError as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    return 0 if result.ok else 1


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
