"""The pipeline side of benchmark P1: a local broker, one controller, one worker, one client.

`Broker` wraps `ops/kafka/cluster` in a dedicated directory on its own ports. `Pipeline`
starts a controller and one worker for a model under a topic prefix of its own, warms them
up with one small job, and times jobs from submit to completion as the client sees it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from inferstream.client.client import Client
from inferstream.config import Config
from inferstream.jobs.output import job_results
from inferstream.kafka.topics import ensure_topics
from inferstream.schemas.records import TaskResult

REPO = Path(__file__).resolve().parents[2]
CLUSTER = [sys.executable, str(REPO / "ops" / "kafka" / "cluster")]
INFERSTREAM = [sys.executable, "-m", "inferstream"]


class BenchError(Exception):
    pass


class Broker:
    """A one-broker Kafka cluster in `directory`; `clean()` stops it and deletes its files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.bootstrap = ""

    def start(self) -> str:
        proc = subprocess.run([*CLUSTER, "start", "--dir", str(self.directory), "--port", "auto"],
                              capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise BenchError(f"cannot start Kafka: {proc.stderr.strip()[-2000:]}")
        self.bootstrap = proc.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def pid(self) -> int | None:
        proc = subprocess.run([*CLUSTER, "status", "--dir", str(self.directory), "--json"],
                              capture_output=True, text=True, timeout=60, check=False)
        try:
            pid: int | None = json.loads(proc.stdout)["nodes"][0]["pid"]
        except (ValueError, KeyError, IndexError):
            return None
        return pid

    def clean(self) -> None:
        subprocess.run([*CLUSTER, "clean", "--dir", str(self.directory)],
                       capture_output=True, timeout=180, check=False)


@dataclass(frozen=True)
class WorkerSettings:
    model: str
    max_batch: int
    max_wait_ms: float
    #: 0: the worker's own choice
    decode_threads: int
    chunk_size: int
    partitions: int
    #: the workers' environment (any experiment's settings)
    env: tuple[tuple[str, str], ...] = ()
    workers: int = 1
    #: more `inferstream worker` arguments (`--compile off`, ...)
    args: tuple[str, ...] = ()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def thread_env(threads: int, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """A child's environment: torch's intra-op pool sized before torch starts, plus `extra`."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "PYTHONUNBUFFERED": "1", **dict(extra)}


class Pipeline:
    """Controller and worker(s) for `settings.model` under a topic prefix of their own."""

    def __init__(self, bootstrap: str, settings: WorkerSettings, logdir: Path) -> None:
        self.settings = settings
        self.logdir = logdir
        self.tag = "".join(c if c.isalnum() else "-" for c in settings.model)
        prefix = f"p1-{self.tag}-{uuid.uuid4().hex[:6]}."
        self.config = Config(bootstrap_servers=bootstrap, topic_prefix=prefix,
                             partitions=settings.partitions,
                             task_partitions=settings.partitions)
        self.client = Client(self.config)
        self.metrics_ports = [free_port() for _ in range(settings.workers)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, name: str, *args: str) -> None:
        # restart off: the CPU readings are of the role's own process, not a supervisor's
        env = {**os.environ, **dict(self.settings.env), "PYTHONUNBUFFERED": "1",
               "INFERSTREAM_RESTART": "off",
               "INFERSTREAM_BOOTSTRAP_SERVERS": self.config.bootstrap_servers,
               "INFERSTREAM_TOPIC_PREFIX": self.config.topic_prefix,
               "INFERSTREAM_PARTITIONS": str(self.config.partitions),
               "INFERSTREAM_TASK_PARTITIONS": str(self.config.task_partitions)}
        with open(self.logdir / f"{self.tag}-{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([*INFERSTREAM, *args], stdout=log,
                                                stderr=subprocess.STDOUT, env=env)

    def start(self, warmup_paths: list[str]) -> None:
        """Topics, controller, workers; returns once a warm-up job has gone through."""
        report = ensure_topics(self.config)
        if not report.ok:
            raise BenchError(f"topics mismatch: {report.mismatched}")
        s = self.settings
        self._spawn("controller", "controller")
        decode = ["--decode-threads", str(s.decode_threads)] if s.decode_threads else []
        for i, port in enumerate(self.metrics_ports):
            self._spawn(f"worker-{i}", "worker", "--model", s.model, "--device", "cpu",
                        "--random-weights", "--worker-id", f"bench-{i}",
                        "--max-batch", str(s.max_batch), "--max-wait-ms", str(s.max_wait_ms),
                        *decode, "--metrics-port", str(port), *s.args)
        self._wait_assigned(timeout_s=900)  # a first compile of googlenet takes minutes
        self.client.submit(s.model, warmup_paths, chunk_size=s.chunk_size).wait(timeout_s=300)

    def _wait_assigned(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise BenchError(f"{name} exited with {proc.returncode}:\n{self._log(name)}")
            logs = [self._log(n) for n in self.procs if n.startswith("worker")]
            if all("assigned partitions=[" in log.replace("=[]", "") for log in logs):
                return
            time.sleep(0.2)
        raise BenchError(f"a worker got no partitions in {timeout_s}s; see {self.logdir}")

    def _log(self, name: str) -> str:
        return (self.logdir / f"{self.tag}-{name}.log").read_text(errors="replace")[-3000:]

    def worker_said(self, start: str) -> str:
        """The first worker's log line that starts with `start` (after the log prefix), or
        "-": how it runs (`threads:`, `allocator:`, `forward of`)."""
        text = (self.logdir / f"{self.tag}-worker-0.log").read_text(errors="replace")
        return next((line[line.index(start):] for line in text.splitlines() if start in line),
                    "-")

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.procs.items()}

    def scrape(self) -> dict[str, float]:
        """`<name>_sum` and `<name>_count` of the workers' histograms, summed over workers."""
        from prometheus_client.parser import text_string_to_metric_families

        values: dict[str, float] = {}
        for port in self.metrics_ports:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name.endswith(("_sum", "_count")):
                        values[sample.name] = values.get(sample.name, 0.0) + sample.value
        return values

    def run_job(self, directory: Path, images: int) -> dict[str, Any]:
        """Submit `directory`, wait for completion; wall time as the client sees it."""
        submitted = time.time()
        t0 = time.perf_counter()
        job = self.client.submit(self.settings.model, [str(directory)],
                                 chunk_size=self.settings.chunk_size)
        status = job.wait(timeout_s=1800)
        wall = time.perf_counter() - t0
        if status.ok_items != images:
            raise BenchError(f"job {job.job_id}: {status.ok_items} ok of {images}")
        results = list(job_results(self.config, job.job_id, status.total_tasks,
                                    self.client.codec))
        return {"wall_s": wall, "rate": images / wall, "job_id": job.job_id,
                **task_timing(results, submitted)}

    def stop(self) -> None:
        """SIGTERM everything started here (the worker drains), SIGKILL what lingers."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _ms(value: Any) -> float:
    """Seconds since the epoch of an Avro timestamp-millis (fastavro gives a datetime)."""
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value) / 1000


def task_timing(results: list[TaskResult], submitted: float) -> dict[str, float]:
    """Worker-side figures from the TaskResults: steady rate, first-result latency, sums."""
    done = sorted((_ms(r["finished_at"]), len(r["items"])) for r in results)
    first, last = done[0][0], done[-1][0]
    after_first = sum(n for _, n in done[1:])
    return {
        # Needs a few tasks: with two, both may finish in the same millisecond.
        "steady_rate": after_first / (last - first) if len(done) > 3 else float("nan"),
        "first_task_consumed_s": min(_ms(r["started_at"]) for r in results) - submitted,
        "first_result_s": first - submitted,
        "last_result_s": last - submitted,
        "decode_item_s": sum(r["decode_seconds"] for r in results),
        "inference_item_s": sum(r["inference_seconds"] for r in results),
    }
