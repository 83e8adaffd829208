"""Issue 26's fault schedule, run N times: one controller, three workers, kill -9 of two
workers, SIGSTOP of one past its session timeout, kill -9 and restart of a broker.

    python -m tests.chaos.schedule_runs --runs 10 [--first-seed S] [--items 20000] [--ms 10]
                                        [--dir DIR] [--keep-passed]

Each run is one `tests.chaos.scenario` run on a fresh 3-broker cluster with that fixed
schedule (`--faults`, the kinds in this order at 6, 24, 42 and 60 % of the job's items; a
killed worker is replaced, as in the scenario); run i has seed S+i, which picks the victims,
the pause and outage durations and the broker. A run passes when the verifier finds every
item exactly once and the job's counts equal its output. Prints "N of N passed" with each
run's seed and durations; a failed run's directory (process and broker logs, report.txt with
the timeline and the evidence of `diagnose.py`) is kept, a passed one's removed unless
`--keep-passed`.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.faults import KILL_BROKER, KILL_WORKER, PAUSE_WORKER
from tests.chaos.scenario import ClusterUnavailableError, ScenarioOptions, run_scenario

#: The schedule of issue 26's acceptance, in order.
FAULTS = (KILL_WORKER, KILL_WORKER, PAUSE_WORKER, KILL_BROKER)


@dataclass(frozen=True)
class RunOutcome:
    seed: int
    directory: Path
    run_s: float
    job_s: float = 0.0
    failure: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failure

    def render(self) -> str:
        verdict = "passed" if self.ok else f"FAILED ({self.failure}); kept {self.directory}"
        return "\n".join([
            f"  seed {self.seed}: job {self.job_s:.1f}s, run {self.run_s:.1f}s, {verdict}",
            *(f"    warning: {warning}" for warning in self.warnings)])


def run_once(options: ScenarioOptions, keep_passed: bool) -> RunOutcome:
    """One scenario run; a failure's report goes to report.txt in its directory.

    Raises ClusterUnavailableError when the brokers cannot start.
    """
    assert options.directory is not None
    started = time.monotonic()
    try:
        result = run_scenario(options)
    except (ClusterUnavailableError, KeyboardInterrupt):
        raise
    except Exception as exc:  # a run that broke down is a failed run: keep it, go on
        (options.directory / "report.txt").write_text(traceback.format_exc())
        return RunOutcome(options.seed, options.directory, time.monotonic() - started,
                          failure=f"aborted: {type(exc).__name__}: {exc}")
    more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
    outcome = RunOutcome(options.seed, options.directory, time.monotonic() - started,
                         result.job_seconds, result.problems[0] + more if result.problems else "",
                         tuple(result.warnings))
    if outcome.ok and not keep_passed:
        shutil.rmtree(options.directory, ignore_errors=True)
    else:
        (options.directory / "report.txt").write_text(result.render() + "\n")
    return outcome


def run_all(runs: int, first_seed: int, base: ScenarioOptions, directory: Path,
            keep_passed: bool) -> list[RunOutcome]:
    outcomes = []
    for i in range(runs):
        seed = first_seed + i
        options = ScenarioOptions(
            seed=seed, items=base.items, workers=base.workers, ms=base.ms,
            worker_kills=FAULTS.count(KILL_WORKER), controllers=1, faults=FAULTS,
            directory=directory / f"run-{i + 1:02d}-seed-{seed}")
        outcomes.append(run_once(options, keep_passed))
        print(f"schedule: run {i + 1} of {runs}:\n{outcomes[-1].render()}", flush=True)
    return outcomes


def summary(outcomes: list[RunOutcome], command: str) -> str:
    passed = sum(outcome.ok for outcome in outcomes)
    jobs = sorted(outcome.job_s for outcome in outcomes)
    return "\n".join([
        f"schedule: {passed} of {len(outcomes)} passed ({', '.join(FAULTS)}; one controller)",
        *(outcome.render() for outcome in outcomes),
        f"job seconds: min {jobs[0]:.1f}, median {jobs[len(jobs) // 2]:.1f}, max {jobs[-1]:.1f}",
        f"command: {command}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.schedule_runs",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--ms", type=float, default=10.0, help="sim model time per item")
    parser.add_argument("--dir", type=Path, default=None, help="default: a new temporary dir")
    parser.add_argument("--keep-passed", action="store_true", help="keep passed runs' logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("inferstream.librdkafka", "tests.chaos.librdkafka"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)  # brokers going away, on purpose
    first = (args.first_seed if args.first_seed is not None
             else random.SystemRandom().randrange(1_000_000))
    directory = args.dir or Path(tempfile.mkdtemp(prefix="chaos-schedule-"))
    base = ScenarioOptions(seed=first, items=args.items, workers=args.workers, ms=args.ms)
    command = (f"python -m tests.chaos.schedule_runs --runs {args.runs} --first-seed {first} "
               f"--items {args.items} --workers {args.workers} --ms {args.ms:g}")
    print(f"schedule: {args.runs} runs from seed {first} in {directory}", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        outcomes = run_all(args.runs, first, base, directory, args.keep_passed)
    except ClusterUnavailableError as exc:
        print(f"schedule: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    text = summary(outcomes, command)
    (directory / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if all(outcome.ok for outcome in outcomes) else 1


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
