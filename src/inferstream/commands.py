"""What each `inferstream` subcommand does: arguments and the function that runs it."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import faulthandler
import json
import signal
import sys
from collections.abc import Callable
from typing import Any

from inferstream.config import Config


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- config, topics ------------------------------------------------------------------------
def _config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show"])


def _config(args: argparse.Namespace, config: Config) -> int:
    _print_json(config.masked())
    return 0


def _topics_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["create", "describe"])
    parser.add_argument("--pools", nargs="+", metavar="POOL",
                        help="pools whose task topics to include (default: --pool)")


def _topics(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.topics import describe_topics, ensure_topics

    pools = tuple(args.pools) if args.pools else None
    for pool in pools or ():
        dataclasses.replace(config, pool=pool)  # validates the name: ConfigError if unsafe
    if args.action == "create":
        report = ensure_topics(config, pools)
        for name in report.created:
            print(f"created  {name}")
        for name in report.existing:
            print(f"exists   {name}")
        for name, problems in report.mismatched.items():
            print(f"MISMATCH {name}: {'; '.join(problems)}", file=sys.stderr)
        return 0 if report.ok else 1
    rows = describe_topics(config, pools)
    for row in rows:
        state = "ok" if not row["problems"] else "; ".join(map(str, row["problems"]))  # type: ignore[call-overload]
        extra = (f"partitions={row['partitions']} replication={row['replication']} "
                 f"compacted={row['compacted']}") if row["exists"] else ""
        print(f"{row['topic']:<45} {extra} {state}")
    return 0 if all(not r["problems"] for r in rows) else 1


# -- worker, controller -----------------------------------------------------------------------
def _dump_stacks_on_usr1() -> None:
    """`kill -USR1 PID` prints every thread's stack to stderr: where a hung process waits."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def resolve_device(spec: str) -> str:
    """`auto` is the first GPU when torch sees one, else the CPU; anything else is checked."""
    import torch

    from inferstream.errors import ConfigError

    if spec == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise ConfigError(f"--device {spec!r} is not auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {spec}: torch sees no CUDA device on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"--device {spec}: only {torch.cuda.device_count()} CUDA devices")
    return str(device)


def _worker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="registry name, e.g. efficientnet_lite0")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--decode-threads", type=int, default=4)
    parser.add_argument("--metrics-port", type=int, help="serve /metrics on this port")
    parser.add_argument("--weights", help="weights file of a torchvision model")
    parser.add_argument("--random-weights", action="store_true",
                        help="random weights when none are found (benchmarks only)")
    parser.add_argument("--worker-id", help="name in results and metrics (default host-pid)")
    parser.add_argument("--instance-id", help="static group membership id")
    parser.add_argument("--session-timeout-ms", type=int, default=10_000,
                        help="a worker silent this long is dead and loses its partitions")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=1_000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=300_000,
                        help="longest gap between fetches; must exceed the slowest batch")
    parser.add_argument("--guarantee", choices=["exactly-once", "at-least-once"],
                        default="exactly-once",
                        help="exactly-once: results and offsets in one transaction")
    parser.add_argument("--idle-exit", type=float, metavar="SECONDS",
                        help="exit after this long with nothing to do (bounded mode)")


def _worker(args: argparse.Namespace, config: Config) -> int:
    from prometheus_client import CollectorRegistry

    from inferstream.metrics import WorkerMetrics, serve_metrics
    from inferstream.models import load_model
    from inferstream.streams.batching import BatchingOptions
    from inferstream.streams.worker import Worker, WorkerOptions

    _dump_stacks_on_usr1()
    model = load_model(args.model, device=resolve_device(args.device), weights=args.weights,
                       random_weights=args.random_weights)
    metrics = WorkerMetrics(CollectorRegistry(), args.model)
    if args.metrics_port:
        serve_metrics(metrics.registry, args.metrics_port)
    options = WorkerOptions(
        model_name=args.model,
        batching=BatchingOptions(max_batch=args.max_batch, max_wait_s=args.max_wait_ms / 1000,
                                 decode_threads=args.decode_threads),
        worker_id=args.worker_id or "", idle_exit_s=args.idle_exit,
        instance_id=args.instance_id, session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.max_poll_interval_ms, guarantee=args.guarantee,
    )
    asyncio.run(Worker(config, options, model, hooks=metrics).run())
    return 0


def _controller_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idle-exit", type=float, metavar="SECONDS",
                        help="exit after this long with no active job (bounded mode)")
    parser.add_argument("--transactional-id", help="default <prefix>controller")
    parser.add_argument("--tasks-per-round", type=int, default=256)


def _controller(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.controller import Controller, ControllerOptions

    _dump_stacks_on_usr1()
    options = ControllerOptions(transactional_id=args.transactional_id,
                                idle_exit_s=args.idle_exit, tasks_per_round=args.tasks_per_round)
    Controller(config, options).run()
    return 0


# -- client ----------------------------------------------------------------------------------
def _submit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help="files, directories, file:// or http(s):// URIs, @LIST files")
    parser.add_argument("--chunk-size", type=int, default=32, help="items per task")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--inline", action="store_true",
                        help="send image bytes through Kafka (no shared filesystem needed)")
    parser.add_argument("--wait", action="store_true", help="follow progress until done")
    parser.add_argument("--output", metavar="FILE", help="with --wait: write the output here")
    parser.add_argument("--timeout", type=float, help="with --wait: give up after SECONDS")


def _submit(args: argparse.Namespace, config: Config) -> int:
    from inferstream.progress import ProgressBar
    from inferstream.streams.client import Client

    client = Client(config)
    try:
        job = client.submit(args.model, args.input, chunk_size=args.chunk_size,
                            top_k=args.top_k, inline=args.inline)
    except OSError as exc:
        print(f"inferstream: error: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    print(job.job_id, flush=True)
    if not (args.wait or args.output):
        return 0
    bar = ProgressBar()
    try:
        status = job.wait(timeout_s=args.timeout, on_progress=bar.update)
    finally:
        bar.close()
    print(f"completed: {status.ok_items} ok, {status.error_items} errors", file=sys.stderr)
    if args.output:
        _write_output(job.results(), args.output, "jsonl")
    return 0


def _status_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="job id (default: jobs of the last day)")
    parser.add_argument("--json", action="store_true")


def _status(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.client import Client
    from inferstream.streams.jobs import recent_jobs

    client = Client(config)
    statuses = [client.job(args.job).progress()] if args.job else recent_jobs(config, client.codec)
    if args.json:
        _print_json([s.as_dict() for s in statuses] if not args.job else statuses[0].as_dict())
        return 0
    for s in statuses:
        total = "?" if s.total_items is None else str(s.total_items)
        reason = f" reason: {s.reason}" if s.reason else ""
        print(f"{s.job_id}  {s.state.lower():<9} {s.model or '-':<20} "
              f"{s.done_items}/{total} ok={s.ok_items} error={s.error_items}{reason}")
    return 0


def _results_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job")
    parser.add_argument("--output", metavar="FILE", help="default: standard output")
    parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")


def _results(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.client import Client

    job = Client(config).job(args.job)
    _write_output(job.results(), args.output, args.format)
    return 0


def _write_output(lines: Any, path: str | None, fmt: str) -> None:
    from inferstream.streams.output import write_lines

    if path is None:
        write_lines(lines, sys.stdout, fmt)
        return
    with open(path, "w", encoding="utf-8", newline="") as handle:
        count = write_lines(lines, handle, fmt)
    print(f"wrote {count} lines to {path}", file=sys.stderr)


Runner = Callable[[argparse.Namespace, Config], int]
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Runner]] = {
    "config": ("print the effective configuration, secrets masked", _config_args, _config),
    "topics": ("create or check every inferstream topic", _topics_args, _topics),
    "worker": ("run an inference worker of a pool", _worker_args, _worker),
    "controller": ("run a controller replica", _controller_args, _controller),
    "submit": ("submit a job", _submit_args, _submit),
    "status": ("show job status", _status_args, _status),
    "results": ("write a job's output lines", _results_args, _results),
}
