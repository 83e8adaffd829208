"""`inferstream submit`, `status` and `results`: the client's commands."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inferstream.commands.admin import print_json
from inferstream.config import Config


def submit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", nargs="+", required=True, metavar="PATH",
                        help="files, directories, file:// or http(s):// URIs, @LIST files")
    parser.add_argument("--chunk-size", type=int, default=32, help="items per task (default: 32)")
    parser.add_argument("--top-k", type=int, default=5,
                        help="best predictions kept per item (default: 5)")
    parser.add_argument("--inline", action="store_true",
                        help="send image bytes through Kafka (no shared filesystem needed)")
    parser.add_argument("--wait", action="store_true", help="follow progress until done")
    parser.add_argument("--output", metavar="FILE", help="with --wait: write the output here")
    parser.add_argument("--timeout", type=float, help="with --wait: give up after SECONDS")


def submit(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.client.client import Client
    from inferstream.streams.client.progress import ProgressBar

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


def status_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", nargs="?", help="job id (default: jobs of the last day)")
    parser.add_argument("--json", action="store_true")


def status(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.client.client import Client
    from inferstream.streams.client.listing import recent_jobs

    client = Client(config)
    statuses = [client.job(args.job).progress()] if args.job else recent_jobs(config, client.codec)
    if args.json:
        print_json([s.as_dict() for s in statuses] if not args.job else statuses[0].as_dict())
        return 0
    for s in statuses:
        total = "?" if s.total_items is None else str(s.total_items)
        reason = f" reason: {s.reason}" if s.reason else ""
        print(f"{s.job_id}  {s.state.lower():<9} {s.model or '-':<20} "
              f"{s.done_items}/{total} ok={s.ok_items} error={s.error_items}{reason}")
    return 0


def results_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job")
    parser.add_argument("--output", metavar="FILE", help="default: standard output")
    parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl",
                        help="(default: jsonl)")


def results(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.client.client import Client

    job = Client(config).job(args.job)
    _write_output(job.results(), args.output, args.format)
    return 0


def _write_output(lines: Any, path: str | None, fmt: str) -> None:
    from inferstream.streams.client.results import write_lines

    if path is None:
        write_lines(lines, sys.stdout, fmt)
        return
    with open(path, "w", encoding="utf-8", newline="") as handle:
        count = write_lines(lines, handle, fmt)
    print(f"wrote {count} lines to {path}", file=sys.stderr)
