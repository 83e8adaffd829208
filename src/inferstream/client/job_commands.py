"""`inferstream submit`, `status` and `results`: the client's commands.

Each command's work takes a `Client`, so tests run it on the in-memory transport. Exit
codes: 0 done, 1 a job whose every item failed, 2 an error (see `cli.main`), 130 Ctrl-C, 143
SIGTERM during `submit --wait`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from inferstream.client.admin import print_json
from inferstream.config import Config, seconds_arg
from inferstream.errors import ConfigError
from inferstream.kafka.preflight import Needs
from inferstream.models import known_models
from inferstream.models.names import SIM_SYNTAX
from inferstream.schemas.records import JobEventType, model_ref

if TYPE_CHECKING:
    from inferstream.client.client import Client, Job, JobStatus
    from inferstream.jobs.follow import OutputFollower

ALL_FAILED = 1
INTERRUPTED = 130  # Ctrl-C
TERMINATED = 128 + signal.SIGTERM
#: A job in these states has no output to read: not accepted yet, or ended without one.
NO_OUTPUT = frozenset({"SUBMITTED", JobEventType.REJECTED, JobEventType.FAILED,
                       JobEventType.CANCELLED})


def submit_needs(config: Config) -> Needs:
    return Needs(topics=(*config.topics("jobs", "job-events", "results"), config.task_topic()),
                 role="client")


def status_needs(config: Config) -> Needs:
    return Needs(topics=config.topics("job-events"), role="client")


def results_needs(config: Config) -> Needs:
    return Needs(topics=config.topics("results", "job-events"), role="client")


def submit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="NAME[:VERSION]",
                        help=f"one of {', '.join(known_models())}, {SIM_SYNTAX}, or a model of "
                        "the workers' repositories, NAME:VERSION pinning one of its versions "
                        "(default: the newest among the pool's live workers)")
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help="files, directories, file:// or http(s):// URIs, @LIST files; "
                        "the controller expands directories and lists on its own host")
    parser.add_argument("--chunk-size", type=int, default=None,
                        help="items per task, >= 1; more is cut to the controller's "
                        "max_chunk_size (default: the policy's task size for the pool, about "
                        "1 s of work, else the controller's default_chunk_size)")
    parser.add_argument("--top-k", type=int, default=5,
                        help="best predictions kept per item, >= 1 (default: %(default)s)")
    parser.add_argument("--priority", type=int, default=0, metavar="N",
                        help="higher first: the pool's capacity goes to the running jobs of "
                        "the highest priority before any lower one's (default: %(default)s)")
    parser.add_argument("--weight", type=float, default=1.0, metavar="W",
                        help="> 0: the job's share of the pool among the running jobs of its "
                        "priority, in proportion to their weights (default: %(default)s)")
    parser.add_argument("--inline", action="store_true",
                        help="send image bytes through Kafka (no shared filesystem needed; "
                        "default: off, send paths)")
    parser.add_argument("--wait", action="store_true",
                        help="follow progress until done (default: off)")
    parser.add_argument("--output", metavar="FILE",
                        help="write the output here (implies --wait; default: none)")
    parser.add_argument("--timeout", type=seconds_arg, metavar="SECONDS",
                        help="with --wait: give up waiting after SECONDS (default: wait on)")


def submit(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.client import Client

    return run_submit(args, Client(config))


def run_submit(args: argparse.Namespace, client: Client) -> int:
    from inferstream.jobs.errors import InvalidJobError

    if args.output:
        _check_writable(args.output)  # before the job runs, not after
    try:
        job = client.submit(args.model, args.input, chunk_size=args.chunk_size,
                            top_k=args.top_k, inline=args.inline, priority=args.priority,
                            weight=args.weight)
    except InvalidJobError as exc:
        if exc.option == "inputs":  # the SDK's list, of which an entry of --input was empty
            raise ConfigError("--input must be paths, URIs or @LIST files, got an empty "
                              "one") from exc
        flag = "--" + exc.option.replace("_", "-")
        raise ConfigError(f"{flag} must be {exc.rule}, got {exc.value}") from exc
    print(job.job_id, flush=True)
    if not (args.wait or args.output):
        return 0
    completed: JobStatus | None = None
    with _output_follower(client, job, args.output) as output:
        try:
            with _sigterm_as_interrupt():
                completed = _follow(job, args.timeout, output)
                print(f"completed: {completed.ok_items} ok, {completed.error_items} errors",
                      file=sys.stderr)
                if output is not None:
                    count = output.finish(completed.total_tasks, completed.home_partition)
                    print(f"wrote {count} lines to {args.output}", file=sys.stderr)
        except KeyboardInterrupt as exc:
            _say_interrupted(job.job_id, completed is not None and output is not None)
            return TERMINATED if isinstance(exc, _Terminated) else INTERRUPTED
    return _all_failed(job.job_id, completed.ok_items, completed.error_items)


def _say_interrupted(job_id: str, completed: bool) -> None:
    """What Ctrl-C or SIGTERM during `submit --wait` leaves: the job, or only its output."""
    where = f"get its output with `inferstream results {job_id} --output FILE`"
    if completed:
        print(f"\ninterrupted while writing the output of job {job_id} (completed): {where}",
              file=sys.stderr)
        return
    print(f"\ninterrupted: job {job_id} goes on without this client; follow it with "
          f"`inferstream status {job_id}`, {where}", file=sys.stderr)


class _Terminated(KeyboardInterrupt):
    """SIGTERM during `submit --wait`: the wait ends as on Ctrl-C, the job goes on."""


def _terminated(_signum: int, _frame: FrameType | None) -> NoReturn:
    raise _Terminated


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `_Terminated` in the main thread for the block (elsewhere: nothing),
    so the output's partial file is removed and the exit says what happened."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _output_follower(client: Client, job: Job, path: str | None
                     ) -> AbstractContextManager[OutputFollower | None]:
    """What writes `--output` while the job runs (`jobs.follow`); nothing without it."""
    from inferstream.jobs.follow import OutputFollower

    if path is None:
        return nullcontext()
    return OutputFollower(client.config, job.job_id, path, client.codec, client.clients)


def _follow(job: Job, timeout_s: float | None, output: OutputFollower | None) -> JobStatus:
    from inferstream.client.progress import ProgressBar

    bar = ProgressBar()

    def progress(status: JobStatus) -> None:
        bar.update(status)
        if output is not None and status.state not in NO_OUTPUT:  # its partition is known
            output.start(status.home_partition)

    try:
        return job.wait(timeout_s=timeout_s, on_progress=progress, on_notice=bar.notice)
    finally:
        bar.close()


def _all_failed(job_id: str, ok: int, errors: int) -> int:
    if ok == 0 and errors > 0:
        print(f"inferstream: every item of job {job_id} failed ({errors} errors): see the "
              f"error of each in `inferstream results {job_id}`", file=sys.stderr)
        return ALL_FAILED
    return 0


def job_arg(text: str) -> str:
    """argparse type of a job id argument: not empty (`status "$JOB"` with JOB unset listed
    every job, as JSON a list where the script expected its job's object)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expects a job id, got an empty one")
    return text


def status_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="*", type=job_arg,
                        help="job ids (default: every job submitted in the last day)")
    parser.add_argument("--json", action="store_true", help="print JSON (default: off)")


def status(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.client import Client

    return run_status(args, Client(config))


def run_status(args: argparse.Namespace, client: Client) -> int:
    from inferstream.client.listing import recent_jobs

    if args.job:  # UnknownJobError for an unknown id
        statuses = [client.job(job_id).progress() for job_id in dict.fromkeys(args.job)]
    else:
        statuses = recent_jobs(client.config, client.codec, clients=client.clients)
    if args.json:  # one job's object, else a list (of the jobs given, or every recent one)
        one = len(args.job) == 1
        print_json(statuses[0].as_dict() if one else [s.as_dict() for s in statuses])
        return 0
    for s in statuses:
        print(_status_line(s))
    return 0


def _status_line(s: JobStatus) -> str:
    from inferstream.client.client import SUBMITTED

    model = model_ref(s.model, s.model_version) if s.model else "-"
    if s.state == SUBMITTED:
        return (f"{s.job_id}  {'submitted':<9} {model:<20} "
                "not yet accepted by a controller")
    total = "?" if s.total_items is None else str(s.total_items)
    reason = f" reason: {s.reason}" if s.reason else ""
    return (f"{s.job_id}  {s.state.lower():<9} {model:<20} "
            f"{s.done_items}/{total} ok={s.ok_items} error={s.error_items}"
            f"{_share(s)}{reason}")


def _share(s: JobStatus) -> str:
    """The job's pool where known and not `default`, and its priority and weight where
    either is not the default (a job shares only its pool)."""
    pool = f" pool={s.pool}" if s.pool not in (None, "default") else ""
    if s.priority == 0 and s.weight == 1.0:
        return pool
    return f"{pool} priority={s.priority} weight={s.weight:g}"


def cancel_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job_arg, help="job id")
    parser.add_argument("--wait", action="store_true",
                        help="wait until the controller has cancelled it (default: off)")
    parser.add_argument("--timeout", type=seconds_arg, default=60.0, metavar="SECONDS",
                        help="with --wait: give up after this long (default: %(default)s)")


def cancel(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.client import Client

    return run_cancel(args, Client(config))


def run_cancel(args: argparse.Namespace, client: Client) -> int:
    """Ask for the cancel; with --wait, print how the job ended (a job that finished first
    stays as it finished)."""
    job = client.job(args.job)
    status = job.progress()  # UnknownJobError for an unknown id
    if status.finished:
        print(f"job {args.job} already {status.state.lower()}: nothing to cancel",
              file=sys.stderr)
        return 0
    job.cancel()
    print(f"cancel requested for job {args.job}", file=sys.stderr)
    if not args.wait:
        return 0
    status = job.wait_final(timeout_s=args.timeout)
    if not status.finished:
        print(f"job {args.job} not cancelled after {args.timeout:g} s (is a controller "
              "running?)", file=sys.stderr)
        return 1
    print(_status_line(status))
    return 0


def results_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job_arg, help="job id")
    parser.add_argument("--output", metavar="FILE",
                        help="(default: standard output; npz needs a file)")
    parser.add_argument("--format", choices=["jsonl", "csv", "npz"], default="jsonl",
                        help="jsonl: one JSON line per item; csv: the top-1 prediction of "
                        "each; npz: numpy arrays, one row per item (embeddings, tensors, "
                        "top-k) (default: %(default)s)")


def results(args: argparse.Namespace, config: Config) -> int:
    from inferstream.client.client import Client

    return run_results(args, Client(config))


def run_results(args: argparse.Namespace, client: Client) -> int:
    if args.output:
        _check_writable(args.output)
    if args.format == "npz" and not args.output:
        raise ConfigError("--format npz needs --output FILE")
    job = client.job(args.job)
    status = job.progress()  # UnknownJobError for an unknown id
    if args.format == "npz":
        written = job.write_npz(args.output)
        bare = (" (index, item, ok, model, model_version only: with no item ok, the outputs' "
                "shapes are unknown)") if written.rows and not written.ok else ""
        print(f"wrote {written.rows} rows to {args.output}{bare}", file=sys.stderr)
        ok, errors, noun = written.ok, written.errors, "rows"
    else:
        tally = _Tally(job.results())
        _write_output(tally, args.output, args.format)
        ok, errors, noun = tally.ok, tally.errors, "lines"
    _say_unfinished(status, f"the {ok + errors} {noun} written are the items done")
    return _all_failed(args.job, ok, errors)


def _say_unfinished(status: JobStatus, written: str) -> None:
    """What the lines of a job that did not complete are: a failed job's is an error (exit
    2; it exited 0, as though the lines were the whole job's), a cancelled or running job's
    a line on standard error."""
    from inferstream.jobs.errors import JobFailedError

    if status.state == JobEventType.FAILED:
        raise JobFailedError(status.job_id, f"{status.reason or 'no reason given'} ({written} "
                             "before it failed)")
    if status.state == JobEventType.CANCELLED:
        print(f"job {status.job_id} was cancelled: {written} before the cancel",
              file=sys.stderr)
    elif not status.finished:
        print(f"job {status.job_id} is still running ({status.state.lower()}): {written} so "
              "far", file=sys.stderr)


class _Tally:
    """Counts the outcomes of the output lines passing through."""

    def __init__(self, lines: Iterator[dict[str, Any]]) -> None:
        self._lines = lines
        self.ok = self.errors = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for line in self._lines:
            if line["status"] == "ok":
                self.ok += 1
            else:
                self.errors += 1
            yield line


def _check_writable(path: str) -> None:
    """ConfigError naming `--output path` unless a file can be written there."""
    from inferstream.jobs.errors import OutputPathError
    from inferstream.jobs.partial import check_writable

    try:
        check_writable(path)
    except OutputPathError as exc:
        raise ConfigError(f"--output {exc}") from exc


def _write_output(lines: Any, path: str | None, fmt: str) -> None:
    from inferstream.jobs.output import replacing, write_lines

    if path is None:
        write_lines(iter(lines), sys.stdout, fmt)
        return
    with replacing(path) as handle:  # in place once whole
        count = write_lines(iter(lines), handle, fmt)
    print(f"wrote {count} lines to {path}", file=sys.stderr)
