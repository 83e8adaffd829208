"""The least-privilege Kafka ACLs of each role, from the names the processes use.

What each role does on the cluster, as read from its code:

- worker: reads its pool's task topic in the pool's group and commits through one
  transactional id per task partition; writes results, dead letters, samples and its start
  announcements; follows the policy and task-control topics (outside any group).
- controller: reads jobs and results in the controller group and commits through one
  transactional id per partition index; writes tasks of every pool, results (a task no worker
  serves fails there), events, its ledger, dead letters and task controls; follows the ledger,
  the policy and the workers' announcements, and describes each pool's workers' group.
- sysinfo: the Faust app reads samples in its group (its id), writes the policy and dead
  letters, and creates, reads and writes its own topics (`<id>-fleet`, the tables'
  changelogs `<id>-<table>-changelog`).
- stream: reads the user's input topic in the stream's group, writes the output topic (and the
  dead-letter topic with `--on-error dlq`), one transactional id per input partition.
- client: submit and cancel write jobs; status, results and the check that a job was
  submitted read jobs, events and results; submit checks each pool's task topic and counts
  the pool's workers (describe).
- admin: `topics create|describe` creates the topics and compares their configs (lowering
  an older compacted topic's `segment.ms`).

The readers outside any group (followers, replays, job output) still name a group,
`Config.reader_group`, whose coordinator librdkafka looks up: Describe on it.

Idempotent producers need no IdempotentWrite on the cluster since Kafka 3.0 (KIP-679): Write
on a topic is enough. Read and Write imply Describe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inferstream.config import Config
from inferstream.errors import ConfigError

ROLES = ("worker", "controller", "sysinfo", "stream", "client", "admin")
#: kafka-acls.sh's flag of each resource type (`--cluster` takes no name)
_RESOURCE_FLAGS = {"topic": "--topic", "group": "--group",
                   "transactional-id": "--transactional-id", "cluster": "--cluster"}
#: kafka-acls.sh's name of each operation
_OPERATION_NAMES = {"read": "Read", "write": "Write", "describe": "Describe",
                    "create": "Create", "describe-configs": "DescribeConfigs",
                    "alter-configs": "AlterConfigs"}


@dataclass(frozen=True)
class Binding:
    """One ALLOW binding for a principal, from any host: `operation` on a resource (`name`,
    matched as `literal` or `prefixed`)."""

    role: str
    resource: str
    name: str
    operation: str
    pattern: str = "literal"

    def acls_args(self, principal: str) -> str:
        """The binding as kafka-acls.sh arguments (after `--bootstrap-server ...`)."""
        resource = _RESOURCE_FLAGS[self.resource]
        target = resource if self.resource == "cluster" else f"{resource} {self.name}"
        return (f"--add --allow-principal {principal} --operation "
                f"{_OPERATION_NAMES[self.operation]} {target} "
                f"--resource-pattern-type {self.pattern}")

    def as_json(self, principal: str) -> dict[str, str]:
        return {"role": self.role, "principal": principal, "host": "*", "permission": "allow",
                "resource_type": self.resource, "resource_name": self.name,
                "pattern_type": self.pattern, "operation": self.operation}


def check_principal(principal: str) -> str:
    """`principal` when it reads TYPE:NAME (User:alice); ConfigError otherwise."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind.strip() or not name.strip() or " " in principal:
        raise ConfigError(f"--principal {principal!r} is not TYPE:NAME, e.g. User:alice")
    return principal


def role_bindings(config: Config, roles: Iterable[str], pools: tuple[str, ...]
                  ) -> list[Binding]:
    """The bindings of each role of `roles`, in that order, for the task topics and groups
    of `pools`; the stream's from `config.stream` (ConfigError without its topics)."""
    for pool in pools:
        dataclasses.replace(config, pool=pool)  # validates the name: ConfigError if unsafe
    makers: dict[str, Callable[[Config, tuple[str, ...]], list[Binding]]] = {
        "worker": _worker, "controller": _controller, "sysinfo": _sysinfo,
        "stream": _stream, "client": _client, "admin": _admin}
    return [binding for role in roles for binding in makers[role](config, pools)]


def default_roles(config: Config) -> tuple[str, ...]:
    """The roles of an installation: the stream's only where its topics are set, the
    admin's only when asked for (an admin is usually a super user)."""
    stream = config.stream.input_topic and config.stream.output_topic
    return tuple(r for r in ROLES if r != "admin" and (r != "stream" or stream))


def _topics(role: str, operation: str, names: Iterable[str]) -> list[Binding]:
    return [Binding(role, "topic", name, operation) for name in names]


def _reader(role: str, config: Config) -> Binding:
    """What a role that reads topics outside any group needs of the group its consumers name
    nonetheless (librdkafka looks up that group's coordinator)."""
    return Binding(role, "group", config.reader_group(), "describe")


def _worker(config: Config, pools: tuple[str, ...]) -> list[Binding]:
    bindings = []
    for pool in pools:
        bindings += [
            Binding("worker", "topic", config.task_topic(pool), "read"),
            Binding("worker", "group", config.worker_group(pool), "read"),
            Binding("worker", "transactional-id", config.worker_transactional_prefix(pool),
                    "write", "prefixed")]
    return (bindings + _topics("worker", "read", config.topics("policy", "task-control"))
            + _topics("worker", "write", config.topics("results", "dlq", "sysinfo", "workers"))
            + [_reader("worker", config)])


def _controller(config: Config, pools: tuple[str, ...]) -> list[Binding]:
    reads = config.topics("jobs", "results", "controller-ledger", "policy", "workers")
    writes = (*config.topics("results", "job-events", "controller-ledger", "dlq",
                             "task-control"), *(config.task_topic(pool) for pool in pools))
    return [*_topics("controller", "read", reads), *_topics("controller", "write", writes),
            Binding("controller", "group", config.controller_group(), "read"),
            *(Binding("controller", "group", config.worker_group(pool), "describe")
              for pool in pools),
            Binding("controller", "transactional-id",
                    f"{config.controller_transactional_base()}.", "write", "prefixed"),
            _reader("controller", config)]


def _sysinfo(config: Config, _pools: tuple[str, ...]) -> list[Binding]:
    app_id = config.sysinfo_app_id()
    own = [Binding("sysinfo", "topic", f"{app_id}-", operation, "prefixed")
           for operation in ("read", "write", "create")]
    return [*_topics("sysinfo", "read", config.topics("sysinfo")),
            *_topics("sysinfo", "write", config.topics("policy", "dlq")), *own,
            Binding("sysinfo", "group", app_id, "read")]


def _stream(config: Config, _pools: tuple[str, ...]) -> list[Binding]:
    stream = config.stream
    if not stream.input_topic or not stream.output_topic:
        raise ConfigError("the stream's ACLs need its --input-topic and --output-topic")
    prefix = config.topic_prefix
    member = dataclasses.replace(config, pool=stream.pool(prefix))  # as stream_config does
    dlq = stream.dead_letter_topic or config.topic("dlq")
    # The members look up the dead-letter topic's partitions whatever --on-error says.
    dlq_operation = "write" if stream.on_error == "dlq" else "describe"
    # A member reads the max.message.bytes of each topic it writes (`kafka.limits`).
    written = (stream.output_topic, *((dlq,) if stream.on_error == "dlq" else ()))
    return [Binding("stream", "topic", stream.input_topic, "read"),
            Binding("stream", "topic", stream.output_topic, "write"),
            Binding("stream", "topic", dlq, dlq_operation),
            *_topics("stream", "describe-configs", written),
            *_topics("stream", "read", config.topics("policy")),
            *_topics("stream", "write", config.topics("sysinfo")),
            Binding("stream", "group", stream.group_id(prefix), "read"),
            Binding("stream", "transactional-id", member.worker_transactional_prefix(),
                    "write", "prefixed"), _reader("stream", config)]


def _client(config: Config, pools: tuple[str, ...]) -> list[Binding]:
    bindings = [*_topics("client", "write", config.topics("jobs")),
                *_topics("client", "read", config.topics("jobs", "job-events", "results"))]
    for pool in pools:
        bindings += [Binding("client", "topic", config.task_topic(pool), "describe"),
                     Binding("client", "group", config.worker_group(pool), "describe")]
    return [*bindings, _reader("client", config)]


def _admin(config: Config, _pools: tuple[str, ...]) -> list[Binding]:
    operations = ("describe", "create", "describe-configs", "alter-configs")
    if config.topic_prefix:
        return [Binding("admin", "topic", config.topic_prefix, operation, "prefixed")
                for operation in operations]
    # Kafka refuses an empty prefix: without one, every topic and creation on the cluster.
    return [Binding("admin", "cluster", "kafka-cluster", "create"),
            *(Binding("admin", "topic", "*", operation) for operation in operations)]
