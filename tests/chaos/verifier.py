"""An independent check of a job's results, built on the results topic, not the ledger.

`ResultsReader` reads every partition of `<prefix>results` from the beginning with
`isolation.level=read_committed`, on a background thread while the run goes (`start`) and to
the end of every partition once it is over (`read_to_end`). It reads them as a job's output
does (`keep_result`: a result in pieces is whole once its last record is in) but keeps every
committed result, not only each task's first. `verify` turns what it read, plus the job's
output lines (`Job.results()`), into a `VerificationReport`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from inferstream.config import Config
from inferstream.jobs.output import keep_result
from inferstream.jobs.pieces import WholeResults
from inferstream.kafka.settings import PARTITION_EOF
from inferstream.schemas import Codec, SchemaError

#: librdkafka's own log lines (a broker going away) go here rather than to stderr.
LIBRDKAFKA_LOG = logging.getLogger("tests.chaos.librdkafka")
#: How many examples each finding keeps.
EXAMPLES = 5

TaskKey = tuple[str, int, int]  # (job_id, task_id, attempt)


@dataclass
class CommittedResult:
    """What the verifier keeps of one committed TaskResult (its record, or the last of its
    pieces, at `partition` and `offset`)."""

    job_id: str
    task_id: int
    attempt: int
    worker: str
    partition: int
    offset: int
    items: list[tuple[str, str]]  # (name, status)
    started_at: float = 0.0  # when its worker took the task (epoch seconds)
    finished_at: float = 0.0


class ResultsReader:
    """Reads every committed TaskResult of the results topic, from the beginning; counts
    as `undecodable` the records of no inferstream kind."""

    def __init__(self, config: Config, name: str = "results-verifier") -> None:
        self.config = config
        self.topic = config.topic("results")
        self.codec = Codec.for_config(config)
        self._whole = WholeResults(self.codec)
        self.records: list[CommittedResult] = []
        self.undecodable = 0
        self.errors: list[str] = []
        self._name = name
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Consumer | None = None
        self._partitions: set[int] = set()
        self._at_end: set[int] = set()

    # -- lifecycle ------------------------------------------------------------------------
    def _open(self) -> Consumer:
        consumer = Consumer(self.config.confluent_config(**{
            "logger": LIBRDKAFKA_LOG,
            "group.id": f"{self._name}-unused",  # assign() only: nothing is ever committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "fetch.message.max.bytes": 16 * 1024 * 1024,
        }))
        metadata = consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        self._partitions = set(metadata.partitions)
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                         for p in sorted(self._partitions)])
        return consumer

    def start(self) -> ResultsReader:
        """Follow the topic on a background thread until `read_to_end` or `close`."""
        self._consumer = self._open()
        self._thread = threading.Thread(target=self._follow, name=self._name, daemon=True)
        self._thread.start()
        return self

    def _follow(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            self._poll_once(self._consumer)

    def read_to_end(self, timeout_s: float = 120.0, settle_s: float = 2.0) -> bool:
        """Read until every partition's end; True when all ends were reached.

        Stops a background thread first and carries on with its consumer, so records are
        never read twice. Polls for at least `settle_s`, so records committed just before
        the call are fetched even where a partition's end was reached earlier.
        """
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=30)
            self._thread = None
        if self._consumer is None:
            self._consumer = self._open()
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self._at_end == self._partitions and time.monotonic() - started >= settle_s:
                return True
            self._poll_once(self._consumer)
        return False

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- reading --------------------------------------------------------------------------
    def _poll_once(self, consumer: Consumer) -> None:
        message = consumer.poll(0.2)
        if message is None:
            return
        error = message.error()
        if error is not None:
            if error.code() == PARTITION_EOF:
                self._at_end.add(message.partition() or 0)
            else:
                self.errors.append(str(error))  # transient (a broker restarting): keep going
            return
        self._at_end.discard(message.partition() or 0)
        value = message.value() or b""
        try:
            self.codec.record_name(value)
        except SchemaError:
            self.undecodable += 1
            return
        keep_result(self._whole, None, value)
        records = [CommittedResult(
            job_id=result["job_id"], task_id=result["task_id"], attempt=result["attempt"],
            worker=result["worker"], partition=message.partition() or 0,
            offset=message.offset() or 0,
            items=[(i["name"], i["status"]) for i in result["items"]],
            started_at=result["started_at"] / 1000, finished_at=result["finished_at"] / 1000,
        ) for result in self._whole.take()]
        with self._lock:
            self.records.extend(records)

    def snapshot(self) -> list[CommittedResult]:
        with self._lock:
            return list(self.records)


@dataclass
class VerificationReport:
    """Counts, with a few examples each, of what breaks "exactly one result per item"."""

    job_id: str
    expected_items: int
    records: int = 0
    items_in_records: int = 0
    lost: int = 0
    lost_examples: list[str] = field(default_factory=list)
    duplicates: int = 0
    duplicate_examples: list[str] = field(default_factory=list)
    reissued_tasks: int = 0  # tasks committed under more than one attempt (allowed: migration)
    output_lines: int = 0
    lost_in_output: int = 0
    lost_in_output_examples: list[str] = field(default_factory=list)
    multi_ok: int = 0
    multi_ok_examples: list[str] = field(default_factory=list)
    multi_outcome: int = 0
    multi_outcome_examples: list[str] = field(default_factory=list)
    unexpected_items: int = 0
    error_outcomes: int = 0
    records_per_worker: dict[str, int] = field(default_factory=dict)
    other_jobs_records: int = 0
    undecodable: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicates or self.lost_in_output or self.multi_ok
                    or self.multi_outcome or self.unexpected_items)

    def problems(self) -> list[str]:
        checks = [
            ("lost items (no committed result)", self.lost, self.lost_examples),
            ("duplicate (job, task, attempt) records", self.duplicates, self.duplicate_examples),
            ("items missing from the job output", self.lost_in_output,
             self.lost_in_output_examples),
            ("items with more than one ok outcome", self.multi_ok, self.multi_ok_examples),
            ("items with more than one outcome", self.multi_outcome,
             self.multi_outcome_examples),
            ("output items not in the input", self.unexpected_items, []),
        ]
        return [f"{n} {what} e.g. {examples}" for what, n, examples in checks if n]

    def render(self) -> str:
        workers = ", ".join(f"{w}={n}" for w, n in sorted(self.records_per_worker.items()))
        lines = [
            f"job {self.job_id}: expected items={self.expected_items}",
            f"  results topic (read_committed): records={self.records} "
            f"items={self.items_in_records} lost={self.lost} "
            f"duplicate(job,task,attempt)={self.duplicates} "
            f"reissued tasks={self.reissued_tasks} other jobs={self.other_jobs_records} "
            f"undecodable={self.undecodable}",
            f"  job output: lines={self.output_lines} missing={self.lost_in_output} "
            f"multi-ok={self.multi_ok} multi-outcome={self.multi_outcome} "
            f"unexpected={self.unexpected_items} errors={self.error_outcomes}",
            f"  records per worker: {workers}",
        ]
        lines += [f"  PROBLEM: {p}" for p in self.problems()]
        lines.append(f"  verdict: {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)


def verify(job_id: str, expected: Iterable[str], records: list[CommittedResult],
           output: list[dict[str, Any]] | None, undecodable: int = 0) -> VerificationReport:
    """Check the committed records of `job_id` and its output lines against `expected`."""
    names = list(expected)
    report = VerificationReport(job_id=job_id, expected_items=len(names), undecodable=undecodable)
    mine = [r for r in records if r.job_id == job_id]
    report.other_jobs_records = len(records) - len(mine)
    report.records = len(mine)
    _check_records(report, names, mine)
    if output is not None:
        _check_output(report, names, output)
    return report


def _check_records(report: VerificationReport, names: list[str],
                   records: list[CommittedResult]) -> None:
    keys: dict[TaskKey, list[CommittedResult]] = defaultdict(list)
    attempts: dict[int, set[int]] = defaultdict(set)
    seen: set[str] = set()
    per_worker: Counter[str] = Counter()
    for record in records:
        keys[(record.job_id, record.task_id, record.attempt)].append(record)
        attempts[record.task_id].add(record.attempt)
        per_worker[record.worker] += 1
        report.items_in_records += len(record.items)
        seen.update(name for name, _ in record.items)
    dupes = {k: v for k, v in keys.items() if len(v) > 1}
    report.duplicates = sum(len(v) - 1 for v in dupes.values())
    report.duplicate_examples = [
        f"task={k[1]} attempt={k[2]} at " + ", ".join(
            f"p{r.partition}@{r.offset} by {r.worker}" for r in v)
        for k, v in sorted(dupes.items())[:EXAMPLES]
    ]
    report.reissued_tasks = sum(1 for a in attempts.values() if len(a) > 1)
    report.records_per_worker = dict(per_worker)
    lost = [n for n in names if n not in seen]
    report.lost = len(lost)
    report.lost_examples = lost[:EXAMPLES]


def _check_output(report: VerificationReport, names: list[str],
                  output: list[dict[str, Any]]) -> None:
    report.output_lines = len(output)
    outcomes: Counter[str] = Counter(str(line["item"]) for line in output)
    oks: Counter[str] = Counter(str(line["item"]) for line in output if line["status"] == "ok")
    report.error_outcomes = sum(1 for line in output if line["status"] != "ok")
    expected = set(names)
    missing = [n for n in names if n not in outcomes]
    report.lost_in_output = len(missing)
    report.lost_in_output_examples = missing[:EXAMPLES]
    multi_ok = sorted(n for n, c in oks.items() if c > 1)
    report.multi_ok = len(multi_ok)
    report.multi_ok_examples = multi_ok[:EXAMPLES]
    multi = sorted(n for n, c in outcomes.items() if c > 1)
    report.multi_outcome = len(multi)
    report.multi_outcome_examples = multi[:EXAMPLES]
    report.unexpected_items = sum(1 for n in outcomes if n not in expected)
