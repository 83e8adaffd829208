#!/usr/bin/env python3
"""Benchmark P5: what `--guarantee exactly-once` costs against `--guarantee at-least-once`.

Two pools side by side on one broker, each under its own topic prefix: a controller and two
workers with `--guarantee exactly-once`, and the same with `--guarantee at-least-once`. Per
model (`sim:ms=1`, and `sim:ms=0`, where nothing but the pipeline and its commits costs time),
the same job runs on each pool in turn, alternating which goes first, `--repeats` times:

* throughput: items / (submit -> COMPLETED as the client sees it), and the workers' steady
  rate (items after the first task result / time from the first to the last `finished_at`),
  with the CPU seconds the workers, the controller and the broker spent on the job;
* the same kill schedule on each pool: kill -9 the oldest worker when 25 % and 60 % of
  the job's items have committed results, starting a replacement each time; then count
  duplicate (job, task, attempt) records in `results` read with read_committed, and lost
  items (no committed result at all).

    .venv/bin/python ops/bench/p5_guarantee.py [--items 10000] [--repeats 3]

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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from committed import CommittedResults, audit
from failover_common import (
    Fleet,
    source_version,
    start_broker,
    wait_for_group,
    write_listing,
)
from p1_cpu import process_cpu_s
from p1_stack import BenchError, Broker

from inferstream.jobs.errors import JobTimeoutError

GUARANTEES = ("exactly-once", "at-least-once")
RESULTS_MD = Path(__file__).resolve().parent / "results" / "p5.md"
METHOD = """\
`inferstream worker --guarantee exactly-once` (the default) commits each partition's finished
tasks with their consumer offset in one Kafka transaction, through one transactional producer
per owned task partition; `--guarantee at-least-once` sends the results through one shared
idempotent producer and then commits the offset. Two pools, one per guarantee, run side by
side on one broker; the same job alternates between them. `sim:ms=1` spends 1 ms per item
asleep, `sim:ms=0` nothing, so its rate is what the pipeline and its commits allow.

* items/s: the job's items over the time from submit to the COMPLETED event the client sees.
* worker steady items/s: items after the first task result over the span of the task
  results' `finished_at` (leaves out job start-up and the controller's completion round).
* CPU ms per item: CPU seconds of the pool's two workers, its controller and the (shared)
  broker during the job, over the job's items; the broker's share includes the idle pool's.
* duplicates: TaskResult records of the job in `results`, read with read_committed, whose
  (job, task, attempt) was already seen; lost items: items of the job with no committed
  result. Job outputs are exact either way (the controller keeps the first result of a task)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["sim:ms=1", "sim:ms=0"])
    parser.add_argument("--items", type=int, default=10_000, help="items per job")
    parser.add_argument("--repeats", type=int, default=3, help="runs per pool and model")
    parser.add_argument("--kill-repeats", type=int, default=3,
                        help="kill-schedule runs per pool")
    parser.add_argument("--kill-at", type=float, nargs="+", default=[0.25, 0.6],
                        help="fractions of the job done at which a worker is killed")
    parser.add_argument("--chunk-size", type=int, default=16, help="items per task")
    parser.add_argument("--partitions", type=int, default=4, help="task topic partitions")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--workdir", type=Path,
                        default=Path(tempfile.gettempdir()) / "inferstream-bench-p5")
    parser.add_argument("--markdown", type=Path, default=RESULTS_MD,
                        help="write the tables here ('-' for nowhere)")
    return parser.parse_args(argv)


class Pool:
    """A controller and two workers of one guarantee under a topic prefix of their own."""

    def __init__(self, args: argparse.Namespace, broker: Broker, guarantee: str, model: str,
                 listing: Path) -> None:
        self.args = args
        self.broker_pid = broker.pid() or 0
        self.guarantee = guarantee
        self.model = model
        self.listing = listing
        self.items = listing.read_text().split()
        tag = f"p5-{'eos' if guarantee == 'exactly-once' else 'alo'}"
        self.fleet = Fleet(broker.bootstrap, args.partitions, args.workdir / "logs", tag)
        self.reader = CommittedResults(self.fleet.config)
        self.workers: list[str] = []
        self._started = 0

    def _worker(self) -> str:
        self._started += 1
        name = f"w{self._started}"
        self.fleet.worker(name, self.model, "--guarantee", self.guarantee,
                          "--session-timeout-ms", str(self.args.session_timeout_ms))
        return name

    def start(self) -> None:
        """Topics and processes; no waiting (both pools start at once)."""
        self.fleet.create_topics()
        self.reader.start()
        self.fleet.start("controller", "controller")
        self.workers = [self._worker(), self._worker()]

    def warm_up(self) -> None:
        """A job of a tenth of the size through the settled pool."""
        wait_for_group(self.fleet, self.workers)
        warmup = self.listing.with_name("warmup.txt")
        warmup.write_text("".join(f"{i}\n" for i in self.items[: len(self.items) // 10]))
        self.fleet.client.submit(self.model, [f"@{warmup}"],
                                 chunk_size=self.args.chunk_size).wait(timeout_s=300)

    def _cpu(self) -> dict[str, float]:
        procs = self.fleet.procs
        return {"workers": sum(process_cpu_s(procs[w].pid) for w in self.workers),
                "controller": process_cpu_s(procs["controller"].pid),
                "broker": process_cpu_s(self.broker_pid)}

    def throughput(self) -> dict[str, Any]:
        """One job, timed from submit to COMPLETED."""
        cpu0 = self._cpu()
        t0 = time.perf_counter()
        job = self.fleet.client.submit(self.model, [f"@{self.listing}"],
                                       chunk_size=self.args.chunk_size)
        status = job.wait(timeout_s=600)
        wall = time.perf_counter() - t0
        cpu = {k: v - cpu0[k] for k, v in self._cpu().items()}
        if status.ok_items != len(self.items):
            raise BenchError(f"{self.guarantee} job {job.job_id}: {status.ok_items} ok")
        self.reader.read_to_end()
        mine = sorted((r.finished_at, len(r.names)) for r in self.reader.snapshot()
                      if r.job_id == job.job_id)
        span = mine[-1][0] - mine[0][0]
        steady = sum(n for _, n in mine[1:]) / span if span > 0 else float("nan")
        return {"job_id": job.job_id, "wall_s": wall, "rate": len(self.items) / wall,
                "steady_rate": steady, "cpu": cpu}

    def kill_schedule(self) -> dict[str, Any]:
        """kill -9 the oldest worker at each `--kill-at` point, replacing it at once."""
        wait_for_group(self.fleet, self.workers)
        job = self.fleet.client.submit(self.model, [f"@{self.listing}"],
                                       chunk_size=self.args.chunk_size)
        kills = []
        for fraction in self.args.kill_at:
            deadline = time.monotonic() + 300
            while self.reader.done_items(job.job_id) < fraction * len(self.items):
                if time.monotonic() > deadline:
                    raise BenchError(f"{self.guarantee} job {job.job_id} stalled")
                time.sleep(0.01)
            victim = self.workers.pop(0)
            self.fleet.procs[victim].send_signal(signal.SIGKILL)
            kills.append(f"{victim}@{self.reader.done_items(job.job_id)}")
            self.fleet.procs[victim].wait(timeout=30)
            self.workers.append(self._worker())
        try:
            status = job.wait(timeout_s=300)
        except JobTimeoutError:
            status = job.progress()
            kills.append("job not completed within 300 s")
        self.reader.read_to_end()
        found = audit(self.reader.snapshot(), job.job_id, self.items)
        return {"job_id": job.job_id, "kills": kills, "ok_items": status.ok_items, **found}

    def stop(self) -> None:
        self.fleet.stop_all()
        self.reader.stop()


def bench_model(args: argparse.Namespace, broker: Broker, model: str,
                listing: Path) -> dict[str, Any]:
    pools = {g: Pool(args, broker, g, model, listing) for g in GUARANTEES}
    runs: dict[str, Any] = {g: {"throughput": [], "kills": []} for g in GUARANTEES}
    try:
        for pool in pools.values():
            pool.start()
        for pool in pools.values():
            pool.warm_up()
        for repeat in range(args.repeats):
            order = GUARANTEES if repeat % 2 == 0 else GUARANTEES[::-1]
            for guarantee in order:
                run = pools[guarantee].throughput()
                runs[guarantee]["throughput"].append(run)
                print(f"{model} {guarantee} #{repeat + 1}: {run['rate']:.0f} items/s "
                      f"(steady {run['steady_rate']:.0f})", file=sys.stderr, flush=True)
        for repeat in range(args.kill_repeats):
            order = GUARANTEES if repeat % 2 == 0 else GUARANTEES[::-1]
            for guarantee in order:
                run = pools[guarantee].kill_schedule()
                runs[guarantee]["kills"].append(run)
                print(f"{model} {guarantee} kills #{repeat + 1}: {json.dumps(run)}",
                      file=sys.stderr, flush=True)
    finally:
        for pool in pools.values():
            pool.stop()
    return runs


# -- report ---------------------------------------------------------------------------------
def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def _cpu_ms_per_item(runs: list[dict[str, Any]], part: str, items: int) -> float:
    return float(1000 * statistics.median(r["cpu"][part] for r in runs) / items)


def _ratios(eos: list[dict[str, Any]], alo: list[dict[str, Any]], key: str) -> str:
    """EOS / ALO of the medians, and the median of the per-repeat ratios (run next to each
    other, so less exposed to load that comes and goes)."""
    of_medians = _median(eos, key) / _median(alo, key)
    pairs = statistics.median(e[key] / a[key] for e, a in zip(eos, alo, strict=True))
    return f"{of_medians:.2f} ({pairs:.2f})"


def throughput_table(results: dict[str, Any], items: int) -> str:
    lines = [
        "| model | guarantee | items/s (submit to done) | EOS / ALO (pairs) | "
        "worker steady items/s | EOS / ALO (pairs) | "
        "CPU ms per item: workers / controller / broker | runs: items/s |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for model, runs in results.items():
        eos, alo = runs["exactly-once"]["throughput"], runs["at-least-once"]["throughput"]
        for guarantee, mine in (("exactly-once", eos), ("at-least-once", alo)):
            first = guarantee == "exactly-once"
            ratio = _ratios(eos, alo, "rate") if first else ""
            steady_ratio = _ratios(eos, alo, "steady_rate") if first else ""
            cpu = " / ".join(f"{_cpu_ms_per_item(mine, p, items):.3f}"
                             for p in ("workers", "controller", "broker"))
            each = ", ".join(f"{r['rate']:.0f}" for r in mine)
            lines.append(f"| {model} | {guarantee} | {_median(mine, 'rate'):.0f} | {ratio} | "
                         f"{_median(mine, 'steady_rate'):.0f} | {steady_ratio} | {cpu} | "
                         f"{each} |")
    return "\n".join(lines)


def kills_table(results: dict[str, Any]) -> str:
    lines = [
        "| model | guarantee | run | killed (worker@items done) | job ok items | "
        "committed records | duplicate (job, task, attempt) records | tasks duplicated | "
        "lost items |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for model, runs in results.items():
        for guarantee in GUARANTEES:
            for i, run in enumerate(runs[guarantee]["kills"], 1):
                lines.append(
                    f"| {model} | {guarantee} | {i} | {', '.join(run['kills'])} | "
                    f"{run['ok_items']} | {run['records']} | {run['duplicate_records']} | "
                    f"{run['duplicated_tasks']} | {run['lost_items']} |")
    return "\n".join(lines)


def report(args: argparse.Namespace, results: dict[str, Any], source: str) -> str:
    command = shlex.join(["python", "ops/bench/p5_guarantee.py", *sys.argv[1:]])
    return "\n".join([
        f"Throughput, medians of {args.repeats} runs per pool (the two pools alternate, and "
        "which goes first alternates too); in brackets the median of the ratios of the runs "
        "made next to each other:",
        "",
        throughput_table(results, args.items),
        "",
        f"The same kill schedule on each pool (kill -9 of the oldest worker at "
        f"{', '.join(f'{f:.0%}' for f in args.kill_at)} of the job's items committed, a "
        "replacement started at once):",
        "",
        kills_table(results),
        "",
        f"Command: `{command}` (1 broker; per pool 1 controller and 2 workers; "
        f"{args.items} items per job, chunk {args.chunk_size}, {args.partitions} task "
        f"partitions, session timeout {args.session_timeout_ms} ms; {os.cpu_count()} "
        f"shared cores; code {source}).",
    ])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shutil.rmtree(args.workdir / "logs", ignore_errors=True)  # those of an earlier run
    (args.workdir / "logs").mkdir(parents=True)
    listing = write_listing(args.workdir / "items.txt", args.items, "p5")
    results: dict[str, Any] = {}
    source = source_version()
    broker = None
    try:
        broker = start_broker(args.workdir / "kafka")
        for model in args.models:
            results[model] = bench_model(args, broker, model, listing)
    except BenchError as exc:
        print(f"p5: {exc}", file=sys.stderr)
        return 1
    finally:
        if broker is not None:
            broker.clean()
    if source_version() != source:
        source = f"{source}, then {source_version()} (src/ changed during the run)"
    (args.workdir / "p5-results.json").write_text(json.dumps(results, indent=2))
    text = report(args, results, source)
    print(text)
    if str(args.markdown) != "-":
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(
            f"# P5: exactly-once against at-least-once\n\n{METHOD}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
