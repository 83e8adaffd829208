"""Every Kafka topic of DESIGN.md, created idempotently and checked against what exists."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from inferstream.config import Config
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.kafka.errors import KafkaSetupError, TopicRefusedError
from inferstream.kafka.refusals import not_authorized
from inferstream.kafka.settings import LIBRDKAFKA_LOG

log = logging.getLogger(__name__)

#: Inline images travel inside job and task records; the broker default (1 MiB) is too small.
LARGE_MESSAGE_BYTES = 16 * 1024 * 1024
#: The configs of the topics whose records may be that large (jobs, tasks, results, dlq, and
#: the controller's ledger, whose entry of a job carries the whole job record).
LARGE_TOPIC_CONFIGS = {"max.message.bytes": str(LARGE_MESSAGE_BYTES)}
#: The configs that are limits inferstream needs at least: a topic that allows more (it took
#: the default of brokers set above 16 MiB) is as good, where it was shown as a MISMATCH and
#: made `topics create` exit 1 on an upgraded cluster whose older ledger had no setting.
LOWER_BOUNDS = frozenset({"max.message.bytes"})
#: How often a compacted topic starts a new segment. The broker compacts only closed segments,
#: and at its defaults (`segment.ms` 7 days, `segment.bytes` 1 GiB) the open one kept every
#: record of a week: the policy topic, which every worker, stream member and controller reads
#: from its start when it starts, held a week of rewrites of a few dozen keys (1 MB an hour
#: with 7 workers), and the sysinfo app's changelogs, which a replica restores whole at each
#: rebalance, 25 MB an hour (a replica on a starved host restored them for over 20 minutes).
COMPACTED_SEGMENT_MS = 600_000
#: The configs that are limits inferstream needs at most (a topic that rolls sooner is as
#: good).
UPPER_BOUNDS = frozenset({"segment.ms"})


@dataclass(frozen=True)
class TopicSpec:
    """What a topic must look like: partitions, replication and the configs we depend on."""

    name: str
    partitions: int
    compacted: bool = False
    configs: dict[str, str] = field(default_factory=dict)

    def all_configs(self) -> dict[str, str]:
        configs = {"cleanup.policy": "compact" if self.compacted else "delete"}
        if self.compacted:
            configs["segment.ms"] = str(COMPACTED_SEGMENT_MS)
        configs.update(self.configs)
        return configs


def topic_specs(config: Config, pools: tuple[str, ...] | None = None) -> list[TopicSpec]:
    """The topics of an installation with the given pools (default: the config's pool).

    Task topics have `task_partitions_for(pool)` partitions, the others `partitions`.
    """
    n = config.partitions
    specs = [
        TopicSpec(config.topic("jobs"), n, configs=LARGE_TOPIC_CONFIGS),
        TopicSpec(config.topic("results"), n, configs=LARGE_TOPIC_CONFIGS),
        TopicSpec(config.topic("job-events"), n),
        TopicSpec(config.topic("sysinfo"), n),
        TopicSpec(config.topic("policy"), 1, compacted=True),
        TopicSpec(config.topic("dlq"), n, configs=LARGE_TOPIC_CONFIGS),
        # The controller's ledger changelog: one record per task state, latest wins. A job's
        # entry holds its record: on a cluster of Kafka's default 1 MiB an inline job over
        # it rolled its partition's transactions back for ever (MSG_SIZE_TOO_LARGE).
        TopicSpec(config.topic("controller-ledger"), n, compacted=True,
                  configs=LARGE_TOPIC_CONFIGS),
        # Finished jobs and superseded task attempts, which workers skip (latest per key).
        TopicSpec(config.topic("task-control"), 1, compacted=True),
        # Workers that are starting, with the models they load (latest per worker id).
        TopicSpec(config.topic("workers"), 1, compacted=True),
    ]
    for pool in dict.fromkeys(pools or (config.pool,)):
        specs.append(TopicSpec(config.task_topic(pool), config.task_partitions_for(pool),
                               configs=LARGE_TOPIC_CONFIGS))
    return specs


def copartitioned(config: Config) -> tuple[str, ...]:
    """The topics in which a job's records share one partition index, its home (where it
    arrived on `jobs`): they need one partition count."""
    return config.topics("jobs", "results", "controller-ledger")


def partition_count_problem(counts: Mapping[str, int]) -> str | None:
    """One line saying what to change where the topics of `counts` (name -> partitions, the
    `copartitioned` ones a command uses) differ in partition count; None where they agree."""
    if len(set(counts.values())) < 2:
        return None
    listed = ", ".join(f"{name} ({n})" for name, n in counts.items())
    return (f"topics {listed} differ in partition count, and a job's records share one "
            "partition index in each: give them one count (`inferstream topics create` "
            "makes them with --partitions) and add partitions to none of them alone")


def admin_client(config: Config, clients: KafkaClients = REAL_CLIENTS) -> Any:
    return clients.admin(config.confluent_config(logger=LIBRDKAFKA_LOG))


@dataclass
class TopicReport:
    """Outcome of `ensure_topics`: what was created, what already fit, what does not."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    #: settings of existing topics brought within their bound, as `key=old -> new`
    altered: dict[str, list[str]] = field(default_factory=dict)
    mismatched: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.mismatched


def ensure_topics(
    config: Config, pools: tuple[str, ...] | None = None, timeout_s: float = 30.0,
    clients: KafkaClients = REAL_CLIENTS,
) -> TopicReport:
    """Create the missing topics; report existing ones whose settings differ from the spec."""
    admin = admin_client(config, clients)
    specs = topic_specs(config, pools)
    try:
        report, existing = create_missing(admin, specs, config.replication_factor, timeout_s)
    except TopicRefusedError as exc:  # the broker said "Authorization failed." alone
        raise not_authorized(config, "admin", f"{exc.what} topic {exc.topic}") from exc
    present = [s for s in specs if s.name in existing]
    report.existing.extend(s.name for s in present)
    found, actual = _described(admin, present, config, timeout_s)
    report.altered.update(lower_upper_bounds(admin, present, actual, timeout_s))
    for name, problems in found.items():
        # (described before `lower_upper_bounds` altered them)
        done = {change.partition("=")[0] for change in report.altered.get(name, ())}
        left = [problem for problem in problems if problem.partition("=")[0] not in done]
        if left:
            report.mismatched[name] = left
    return report


def lower_upper_bounds(admin: AdminClient, specs: list[TopicSpec],
                       actual: Mapping[str, dict[str, object]], timeout_s: float
                       ) -> dict[str, list[str]]:
    """Set each existing compacted topic's `UPPER_BOUNDS` settings above their spec's to it
    (a compacted topic an earlier release made rolled a segment a week); the changes made, by
    topic; `actual`: the topics' settings as described. One the cluster refuses (no
    AlterConfigs ACL) stays a mismatch, whose line says
    how to make it."""
    changes: dict[str, dict[str, tuple[str, str]]] = {}
    for spec in specs:
        configs = actual.get(spec.name, {})
        if "compact" not in str(getattr(configs.get("cleanup.policy"), "value", "")):
            continue  # not what inferstream makes: left to the operator, as its MISMATCH says
        for key, want in spec.all_configs().items():
            have = getattr(configs.get(key), "value", None)
            if key in UPPER_BOUNDS and have is not None and have.isdecimal() \
                    and int(have) > int(want):
                changes.setdefault(spec.name, {})[key] = (have, want)
    if not changes:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
        ConfigEntry(key, want, incremental_operation=AlterConfigOpType.SET)
        for key, (_, want) in keys.items()]) for name, keys in changes.items()]
    altered: dict[str, list[str]] = {}
    for resource, future in admin.incremental_alter_configs(
            resources, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except (KafkaException, TimeoutError) as exc:
            log.warning("cannot alter topic %s (%s): see its MISMATCH line", resource.name, exc)
            continue
        altered[resource.name] = [f"{key}={have} -> {want}"
                                  for key, (have, want) in changes[resource.name].items()]
    return altered


def create_missing(admin: AdminClient, specs: list[TopicSpec], replication_factor: int | None,
                   timeout_s: float = 30.0) -> tuple[TopicReport, set[str]]:
    """Create the topics of `specs` that do not exist and wait until the brokers show them;
    returns what was done and the names that existed before."""
    existing = _list_topics(admin, timeout_s)
    report = TopicReport()
    missing = [s for s in specs if s.name not in existing]
    if missing:
        _create(admin, missing, replication_factor, timeout_s, report)
        wait_until_visible(admin, {s.name: s.partitions for s in missing}, timeout_s)
    return report, existing


def _list_topics(admin: AdminClient, timeout_s: float) -> set[str]:
    try:
        return set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot list topics: {exc.args[0]}") from exc


def _create(
    admin: AdminClient,
    specs: list[TopicSpec],
    replication_factor: int | None,
    timeout_s: float,
    report: TopicReport,
) -> None:
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=replication_factor or -1,
            config=s.all_configs(),
        )
        for s in specs
    ]
    for name, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result()
            report.created.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            if error.name() == "TOPIC_ALREADY_EXISTS":  # a concurrent creator won the race
                report.existing.append(name)
                continue
            if error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                raise TopicRefusedError(name, "create") from exc
            raise KafkaSetupError(f"cannot create topic {name}: {error.str()}") from exc


def wait_until_visible(admin: AdminClient, partitions: dict[str, int],
                       timeout_s: float = 30.0) -> None:
    """Block until the brokers' metadata shows each topic with its partitions.

    CreateTopics returns once the KRaft controller has committed the topics; each broker
    learns of them a moment later, and until then answers UNKNOWN_TOPIC_OR_PART. A process
    started right after `topics create` must not see that.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        topics = admin.list_topics(timeout=timeout_s).topics
        waiting = sorted(name for name, count in partitions.items()
                         if name not in topics or topics[name].error is not None
                         or len(topics[name].partitions) < count)
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"created topics not visible after {timeout_s:g}s: {waiting}")
        time.sleep(0.1)


def _described(admin: AdminClient, specs: list[TopicSpec], config: Config, timeout_s: float
               ) -> tuple[dict[str, list[str]], dict[str, dict[str, object]]]:
    """The differences of each existing topic of `specs` from its spec, and its settings."""
    if not specs:
        return {}, {}
    metadata = admin.list_topics(timeout=timeout_s).topics
    resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in specs]
    described = admin.describe_configs(resources, request_timeout=timeout_s)
    actual = {res.name: _configs(config, res.name, future) for res, future in described.items()}
    problems: dict[str, list[str]] = {}
    for spec in specs:
        found = _differences(spec, metadata[spec.name], actual[spec.name], config)
        if found:
            problems[spec.name] = found
    counts = {name: len(metadata[name].partitions) for name in copartitioned(config)
              if name in actual}
    if partition_count_problem(counts):
        listed = ", ".join(f"{name} {n}" for name, n in counts.items())
        for name in counts:
            problems.setdefault(name, []).append(
                f"partition counts differ ({listed}): a job's records share one partition index")
    return problems, actual


def _configs(config: Config, topic: str, described: Any) -> dict[str, object]:
    """A topic's described settings; AuthorizationError in words where this principal may not
    read them (DescribeConfigs)."""
    try:
        return described.result()  # type: ignore[no-any-return]
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise not_authorized(config, "admin", f"read the settings of topic {topic} "
                                 "(DescribeConfigs)") from exc
        raise


def _differences(spec: TopicSpec, meta: object, configs: dict[str, object], config: Config
                 ) -> list[str]:
    partitions = getattr(meta, "partitions", {})
    found = []
    if len(partitions) < spec.partitions:
        found.append(f"partitions {len(partitions)} < expected {spec.partitions}")
    if config.replication_factor and partitions:
        replicas = len(next(iter(partitions.values())).replicas)
        if replicas != config.replication_factor:
            found.append(f"replication factor {replicas} != expected {config.replication_factor}")
    for key, want in spec.all_configs().items():
        have = getattr(configs.get(key), "value", None)
        if key in LOWER_BOUNDS | UPPER_BOUNDS and have is not None and have.isdecimal():
            problem = _out_of_bound(spec.name, key, int(have), int(want))
            if problem:
                found.append(problem)
        elif have != want:
            found.append(f"{key}={have} (expected {want})")
    return found


def _out_of_bound(topic: str, key: str, have: int, want: int) -> str | None:
    """What is wrong with a setting that inferstream needs at least (`LOWER_BOUNDS`) or at
    most (`UPPER_BOUNDS`) `want` of, with the command that fixes it; None where it is within."""
    lower = key in LOWER_BOUNDS
    if (have >= want) if lower else (have <= want):
        return None
    return (f"{key}={have} (expected {'at least' if lower else 'at most'} {want}; "
            f"{'raise' if lower else 'lower'} it: kafka-configs --alter --entity-type topics "
            f"--entity-name {topic} --add-config {key}={want})")


@dataclass(frozen=True)
class TopicRow:
    """One expected topic as `topics describe` shows it."""

    topic: str
    exists: bool
    problems: list[str]
    partitions: int = 0
    replication: int = 0
    #: as the cluster has it (`cleanup.policy` holds compact), not as inferstream expects
    compacted: bool = False


def describe_topics(
    config: Config, pools: tuple[str, ...] | None = None, clients: KafkaClients = REAL_CLIENTS
) -> list[TopicRow]:
    """One row per expected topic: partitions, replication, cleanup policy, problems."""
    # preflight imports this module: its metadata helpers are imported when called
    from inferstream.kafka.preflight import absent, forbidden, listing, plural

    admin = admin_client(config, clients)
    specs = topic_specs(config, pools)
    names = [s.name for s in specs]
    # each topic the listing lacks asked by name: refused to this principal, or missing
    existing = listing(admin, tuple(names), 30).topics
    refused = forbidden(existing, names)
    if refused:
        raise not_authorized(config, "admin", f"describe {plural(refused, 'topic')} "
                                              f"{', '.join(refused)}")
    missing = set(absent(existing, names))
    present = [s for s in specs if s.name not in missing]
    problems, configs = _described(admin, present, config, 30)
    rows: list[TopicRow] = []
    for spec in specs:
        meta = existing.get(spec.name)
        if spec.name in missing:
            rows.append(TopicRow(spec.name, exists=False, problems=["missing"]))
            continue
        parts = meta.partitions
        replicas = len(next(iter(parts.values())).replicas) if parts else 0
        policy = getattr(configs[spec.name].get("cleanup.policy"), "value", None) or ""
        rows.append(TopicRow(spec.name, exists=True, problems=problems.get(spec.name, []),
                             partitions=len(parts), replication=replicas,
                             compacted="compact" in policy.split(",")))
    return rows
