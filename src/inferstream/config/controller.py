"""The [controller] section of Config: `inferstream controller` settings, from TOML,
`INFERSTREAM_CONTROLLER_<NAME>` and flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferstream.config.fields import at_least as _at_least
from inferstream.config.fields import check_port, idle_exit, metrics_addr, metrics_port, setting
from inferstream.errors import ConfigError

#: The most items a task may hold: a result whose every item failed (each with a short
#: reason, `records.results.error_items`) must still fit in one 16 MiB record beside the
#: task's names (at most 8 MiB, `controller.expansion.TASK_BYTES_CAP`).
MAX_CHUNK_SIZE = 100_000


@dataclass(frozen=True)
class ControllerConfig:
    """`inferstream controller`: one controller replica ([controller] in TOML)."""

    transactional_id: str | None = setting(
        None, "base of the per-partition transactional ids, <base>.<partition> "
        "(empty: <prefix>controller)")
    metrics_port: int | None = metrics_port()
    metrics_addr: str = metrics_addr()
    session_timeout_ms: int = setting(
        6_000, "a replica silent this long is dead and its partitions go to the others "
        "(the broker's group.min.session.timeout.ms is 6 s by default)")
    heartbeat_interval_ms: int = setting(
        500, "controller group heartbeat interval: a survivor learns of a rebalance at its "
        "next heartbeat, so this adds up to its length to a takeover")
    max_poll_interval_ms: int = setting(
        60_000, "longest gap between two rounds' fetches, above a stuck commit's 2 x "
        "commit_timeout_s + call_grace_s; also how long a rebalance waits for a replica "
        "paused in it (librdkafka's rebalance timeout)")
    migration_slack: float = setting(
        3.0, "a task is late after this many times its expected time (the work queued before "
        "it at its worker's per-item time) plus the floor; 0: no migration")
    migration_floor_s: float = setting(
        20.0, "seconds added to every task's deadline (a worker's restart or rebalance)")
    migration_check_s: float = setting(1.0, "seconds between two checks for late tasks")
    speculation_floor_s: float = setting(
        2.0, "a late task of a live, healthy worker (slower than its peers, or past its "
        "deadline) is issued again only where it would finish this many seconds sooner")
    speculation_cap: float = setting(
        0.1, "share of a pool's slots (the task partitions its live workers own) that may "
        "hold a speculative copy (a task its worker may be running, issued again) at once; "
        "at least one")
    max_attempts: int = setting(
        4, "a task late on this many attempts fails its items with the reason")
    model_wait_s: float = setting(
        180.0, "a task that no live worker of its pool may serve waits this long for one "
        "(longer while a worker announces it is starting with the model) before its items "
        "fail with the reason; 0: only while one is starting")
    issue_ahead_s: float = setting(
        10.0, "seconds of work each live worker is kept ahead with: a job's tasks are issued "
        "as the workers get through them, each to the worker that would finish it first, so "
        "a faster worker gets more and one that dies holds little; 0: all tasks at once, "
        "round robin over the partitions")
    backlog_target_s: float = setting(
        60.0, "the pool's desired workers (inferstream_pool_desired_workers) are those that "
        "would clear the work waiting within this many seconds")
    backlog_item_s: float = setting(
        0.05, "seconds per item counted in a pool's backlog for a model that no worker of the "
        "pool has measured yet (once one has, the last figure measured is kept)")
    tasks_per_round: int = setting(
        256, "tasks issued per job per round, so one huge job cannot starve the others")
    default_chunk_size: int = setting(
        32, "items per task of a job without --chunk-size when the policy has no task size "
        "for its pool")
    max_chunk_size: int = setting(
        8_192, "most items per task, whatever the job's --chunk-size or the policy's task size "
        f"(at most {MAX_CHUNK_SIZE:,}): bounds a task's result record, what a worker holds of "
        "it and what a client decodes at once")
    progress_interval_s: float = setting(1.0, "least time between a job's PROGRESS events")
    idle_exit_s: float | None = idle_exit("with no active job")
    retain_finished_s: float = setting(
        600.0, "finished jobs are forgotten, their ledger entries too, after this long")
    watchdog_s: float | None = setting(
        90.0, "a round running this long has every thread's stack dumped once")
    commit_timeout_s: float = setting(
        20.0, "librdkafka timeout of send_offsets and abort; a commit gets twice this")
    call_grace_s: float = setting(
        5.0, "a librdkafka call this long past its own timeout is given up on as stuck "
        "(librdkafka#5456)")


def validate_controller(controller: ControllerConfig) -> None:
    check_port("controller.metrics_port", controller.metrics_port)
    _at_least("controller.tasks_per_round", controller.tasks_per_round, 1)
    _at_least("controller.default_chunk_size", controller.default_chunk_size, 1)
    _at_least("controller.max_chunk_size", controller.max_chunk_size, 1)
    if controller.max_chunk_size > MAX_CHUNK_SIZE:
        raise ConfigError(f"controller.max_chunk_size must be at most {MAX_CHUNK_SIZE:,}, "
                          f"got {controller.max_chunk_size:,}")
    for name in ("progress_interval_s", "idle_exit_s", "retain_finished_s", "watchdog_s"):
        _at_least(f"controller.{name}", getattr(controller, name), 0)
    _at_least("controller.commit_timeout_s", controller.commit_timeout_s, 0.001)
    _at_least("controller.call_grace_s", controller.call_grace_s, 0.001)
    _at_least("controller.session_timeout_ms", controller.session_timeout_ms, 1)
    _at_least("controller.max_attempts", controller.max_attempts, 1)
    for name in ("migration_slack", "migration_floor_s", "migration_check_s", "issue_ahead_s",
                 "model_wait_s", "backlog_item_s", "speculation_floor_s", "speculation_cap"):
        _at_least(f"controller.{name}", getattr(controller, name), 0)
    _at_least("controller.backlog_target_s", controller.backlog_target_s, 0.001)
    _at_least("controller.heartbeat_interval_ms", controller.heartbeat_interval_ms, 1)
    if controller.heartbeat_interval_ms >= controller.session_timeout_ms:
        raise ConfigError(
            "controller.heartbeat_interval_ms must be below controller.session_timeout_ms")
    if controller.max_poll_interval_ms < controller.session_timeout_ms:
        raise ConfigError(
            "controller.max_poll_interval_ms must be at least controller.session_timeout_ms")
