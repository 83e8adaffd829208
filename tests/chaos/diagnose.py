"""Evidence for a failed chaos run: where the task backlog sits and what the logs say."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from inferstream.config import Config
from tests.chaos.verifier import LIBRDKAFKA_LOG

SRC = Path(__file__).resolve().parents[2] / "src" / "inferstream"

#: Log lines worth counting per process: (label, pattern).
NOTABLE = (
    ("exception", re.compile(r"^(\w+(?:Error|Exception)): ")),
    ("listener failed", re.compile(r"subscription listener .* failed (\w+)")),
    ("partition lost", re.compile(r"partition lost, .*: (fenced|no longer|commit failed)")),
    ("commit outcome unknown", re.compile(r"commit outcome unknown .*error=(\w+)")),
    ("cannot take partition", re.compile(r"cannot take partition .*: (\w+)")),
    ("unclosed producer", re.compile(r"(Unclosed AIOKafkaProducer)")),
    ("left group", re.compile(r"(LeaveGroup request succeeded)")),
    ("duplicate dropped", re.compile(r"(duplicate result dropped)")),
    ("transaction failed", re.compile(r"transaction failed \((\w+)")),
    # the controller's
    ("fenced partition", re.compile(r"partition (\d+): another replica took it over")),
    ("rolled back partition", re.compile(r"partition (\d+): transaction (?:stuck|failed)")),
    ("retook partition", re.compile(r"partition (\d+): still assigned here")),
    ("init failed", re.compile(r"cannot init transactions of (\S+)")),
    ("rebuild failed", re.compile(r"(cannot rebuild state yet)")),
    ("accepted", re.compile(r"job (\S+) accepted")),
    ("owning", re.compile(r"owning job partitions=(\[[\d, ]*\])")),
)
ASSIGNED = re.compile(r"^(\S+ \S+) .*assigned partitions=\[([\d, ]*)\]")


def source_fingerprint() -> str:
    """A hash of the package's sources: tells whether they changed during a run."""
    digest = hashlib.sha256()
    for path in sorted(SRC.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def task_backlog(config: Config, group_id: str) -> dict[int, tuple[int, int]]:
    """Task partitions whose committed offset is short of their end: {p: (committed, end)}.

    The end is the last stable offset (read_committed); control markers make a done
    partition's committed offset end one or two short of it, so only gaps > 2 count.
    """
    topic = config.task_topic()
    consumer = Consumer(config.confluent_config(**{
        "logger": LIBRDKAFKA_LOG, "group.id": group_id, "enable.auto.commit": False,
        "isolation.level": "read_committed"}))
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        committed = consumer.committed([TopicPartition(topic, p) for p in sorted(parts)],
                                       timeout=30)
        backlog = {}
        for tp in committed:
            _, end = consumer.get_watermark_offsets(tp, timeout=30)
            done = max(tp.offset, 0)
            if end - done > 2:
                backlog[tp.partition] = (done, end)
        return backlog
    finally:
        consumer.close()


def claimed_partitions(logdir: Path) -> dict[str, tuple[str, list[int]]]:
    """Per worker log: when it last logged its partitions, and which."""
    claims = {}
    for log in sorted(logdir.glob("w*.log")):
        last = None
        for line in log.read_text(errors="replace").splitlines():
            match = ASSIGNED.match(line)
            if match:
                last = match
        if last is not None:
            parts = [int(p) for p in last.group(2).split(",") if p.strip()]
            claims[log.stem] = (last.group(1), parts)
    return claims


def notable_lines(logdir: Path) -> dict[str, Counter[str]]:
    """Per process log: counts of the NOTABLE kinds of line (with their detail)."""
    found: dict[str, Counter[str]] = {}
    for log in sorted(logdir.glob("*.log")):
        if log.stem.startswith("broker-"):
            continue
        counts: Counter[str] = Counter()
        for line in log.read_text(errors="replace").splitlines():
            for label, pattern in NOTABLE:
                match = pattern.search(line)
                if match:
                    counts[f"{label}: {match.group(1)}"] += 1
        if counts:
            found[log.stem] = counts
    return found


def render_evidence(config: Config, group_id: str, logdir: Path) -> str:
    """The backlog, who claims it, and the notable log lines, as text for the report."""
    lines = []
    try:
        backlog = task_backlog(config, group_id)
        lines.append("task backlog (partition: committed/end): " + (", ".join(
            f"p{p}: {c}/{e}" for p, (c, e) in sorted(backlog.items())) or "none"))
    except Exception as exc:  # evidence is best effort; the verdict stands without it
        lines.append(f"task backlog unknown: {exc!r}")
    claims = claimed_partitions(logdir)
    lines.append("last logged assignment: " + "; ".join(
        f"{w}={parts} at {when}" for w, (when, parts) in claims.items()))
    for name, counts in notable_lines(logdir).items():
        lines.append(f"{name}.log: " + ", ".join(f"{k} x{n}" for k, n in counts.most_common()))
    return "\n".join(lines)
