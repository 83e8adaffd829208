"""The topics of an installation: names under the prefix, partitions, compaction, limits."""

from __future__ import annotations

import pytest

from inferstream.config import Config
from inferstream.kafka.topics import LARGE_MESSAGE_BYTES, TopicSpec, topic_specs

SHARED = ("jobs", "results", "job-events", "sysinfo", "policy", "dlq", "controller-ledger",
          "task-control", "workers")
COMPACTED = {"policy", "controller-ledger", "task-control", "workers"}
#: Topics whose records may carry images inline (a job's ledger entry holds its record).
LARGE = {"jobs", "results", "dlq", "controller-ledger"}


def by_short_name(config: Config, specs: list[TopicSpec]) -> dict[str, TopicSpec]:
    assert all(s.name.startswith(config.topic_prefix) for s in specs)
    named = {s.name[len(config.topic_prefix):]: s for s in specs}
    assert len(named) == len(specs), "duplicate topic names"
    return named


def test_one_task_topic_per_pool_and_the_shared_topics() -> None:
    config = Config(topic_prefix="acme.", partitions=6)
    specs = by_short_name(config, topic_specs(config, ("gpu", "cpu")))
    assert set(specs) == {*SHARED, "tasks.gpu", "tasks.cpu"}
    assert specs["tasks.gpu"].name == "acme.tasks.gpu" == config.task_topic("gpu")


def test_default_pool_is_the_configs_pool() -> None:
    config = Config(pool="a100")
    specs = by_short_name(config, topic_specs(config))
    assert set(specs) == {*SHARED, "tasks.a100"}
    assert by_short_name(config, topic_specs(config, ())) == specs


@pytest.mark.parametrize("partitions", [1, 4, 12])
def test_partitions_follow_the_config_except_policy_and_tasks(partitions: int) -> None:
    config = Config(partitions=partitions, task_partitions=partitions + 1)
    specs = by_short_name(config, topic_specs(config, ("gpu",)))
    for name, spec in specs.items():
        # the policy table is small and read whole by every assignor, the task controls by
        # every worker, the workers' announcements by every controller: one partition each
        want = {"policy": 1, "task-control": 1, "workers": 1,
                "tasks.gpu": partitions + 1}.get(name, partitions)
        assert spec.partitions == want, name


def test_task_topics_have_enough_partitions_for_fine_shares_and_a_pool_may_have_more() -> None:
    config = Config(pool_partitions=("gpu=240",))
    specs = by_short_name(config, topic_specs(config, ("gpu", "cpu")))
    assert (specs["tasks.gpu"].partitions, specs["tasks.cpu"].partitions) == (240, 120)
    assert specs["jobs"].partitions == config.partitions == 12


def test_compaction_and_cleanup_policy() -> None:
    config = Config()
    specs = by_short_name(config, topic_specs(config, ("gpu",)))
    for name, spec in specs.items():
        assert spec.compacted == (name in COMPACTED), name
        want = "compact" if name in COMPACTED else "delete"
        assert spec.all_configs()["cleanup.policy"] == want, name


def test_topics_that_carry_images_allow_large_records() -> None:
    config = Config()
    specs = by_short_name(config, topic_specs(config, ("gpu", "cpu")))
    for name, spec in specs.items():
        large = name in LARGE or name.startswith("tasks.")
        got = spec.all_configs().get("max.message.bytes")
        assert got == (str(LARGE_MESSAGE_BYTES) if large else None), name
    assert LARGE_MESSAGE_BYTES >= 16 * 1024 * 1024


def test_a_pool_named_twice_gets_one_task_topic() -> None:
    config = Config()
    names = [s.name for s in topic_specs(config, ("gpu", "gpu"))]
    assert names.count(config.task_topic("gpu")) == 1


def test_the_ledger_takes_the_entry_of_any_job_the_jobs_topic_takes() -> None:
    """A job's JOB entry in the ledger carries its whole record: created with Kafka's default
    of 1 MiB, the ledger refused the entry of an inline job over it, and the controller
    rolled back every transaction of the job's home partition, twice a second, for ever
    (MSG_SIZE_TOO_LARGE): that job was never accepted, nor any other job of its partition
    finished."""
    config = Config()
    specs = by_short_name(config, topic_specs(config))
    limit = int(specs["jobs"].all_configs()["max.message.bytes"])
    assert int(specs["controller-ledger"].all_configs().get("max.message.bytes", 0)) >= limit


def test_compacted_topics_roll_their_segment_every_10_minutes() -> None:
    """The broker compacts only closed segments: at its default roll (7 days) the policy
    topic, which every worker reads from its start, kept a week of rewrites of a few keys."""
    config = Config()
    specs = by_short_name(config, topic_specs(config, ("gpu",)))
    for name, spec in specs.items():
        roll = spec.all_configs().get("segment.ms")
        if name in COMPACTED:
            assert roll is not None and int(roll) <= 600_000, name
        else:
            assert roll is None, name
