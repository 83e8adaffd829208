"""The sysinfo Faust app: samples in, the workers table and the policy out.

Two stages, so that one replica sees a whole pool while the work stays partitioned:

1. `intake` (an agent over `sysinfo`, keyed and partitioned by worker id) reads each record,
   dead-letters what it cannot decode, drops and counts what is absurd, folds the sample into
   the windowed aggregates table per (worker, model) and forwards the worker's record.
2. `fleet` (an agent over the one-partition `sysinfo-fleet` topic) keeps the workers table:
   the latest record per worker. The replica that owns that partition is the policy owner:
   its timer runs the strategies and writes PolicyEntry records to the compacted `policy`
   topic, and every HTTP view is answered there (other replicas forward the request).

Both tables have standby replicas on the other replicas (`table_standby_replicas`): a replica
killed with -9 leaves the group after the session timeout and a survivor takes its partitions
with their tables. Faust's `exactly_once` is not used (open bugs, e.g.
faust-streaming/faust#47); entries are last-writer-wins.

Why not one GlobalTable that every replica reads: faust warns that a GlobalTable shared by
several instances may recover forever (`faust/tables/globaltable.py`; faust-streaming/faust#212),
and the in-memory store drops every key outside the active partitions when a recovery
completes (`faust/stores/memory.py`, `on_recovery_completed`), so a standby's copy is no view to
serve from. Hence the repartition to one partition, read on its owner only.
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP

from inferstream.config import Config
from inferstream.kafka.deadletters import dead_letter
from inferstream.leftovers import claim
from inferstream.policy.entries import policy_key
from inferstream.schemas import Codec
from inferstream.schemas.records import PolicyEntry, PolicyKind, WorkerHealth, now_ms, plain_record
from inferstream.sysinfo.acl_stop import quiet_refusals, refusal, refused_by_acl
from inferstream.sysinfo.aggregates import ModelAggregate, aggregate_key
from inferstream.sysinfo.faust_checks import ChecksSinceRebalance
from inferstream.sysinfo.faust_stop import bound_faust_stop, exit_at_a_second_signal
from inferstream.sysinfo.fleet import Fleet, record_of
from inferstream.sysinfo.intake import read_sample
from inferstream.sysinfo.metrics import SysinfoMetrics
from inferstream.sysinfo.workers import WorkerRecord, performance_ref, performances

log = logging.getLogger(__name__)

AGGREGATES_TABLE = "sysinfo-aggregates"
WORKERS_TABLE = "sysinfo-workers"
#: How long the fleet topic keeps a record: its owner reads each one once, as it comes.
FLEET_RETENTION_MS = 3_600_000
#: Any key of the one-partition workers table: where requests for the whole fleet go.
FLEET_KEY = "fleet"


@dataclass(frozen=True)
class Topology:
    """What the broker says about the topics the app reads and writes."""

    sysinfo_partitions: int
    dlq_partitions: int
    #: Replicas of the sysinfo topic: the app's own topics (changelogs) get as many.
    replication: int = 1


def faust_settings(config: Config, topology: Topology, datadir: str) -> dict[str, Any]:
    """faust.App settings from the process's Config (the one place they are made).

    Connection and security settings carry over; `kafka_config` pass-through does not (faust
    builds its aiokafka clients itself).
    """
    from inferstream.sysinfo.web import web_settings

    sysinfo = config.sysinfo
    settings: dict[str, Any] = {
        "id": config.sysinfo_app_id(),
        "broker": [f"kafka://{s.strip()}" for s in config.bootstrap_servers.split(",")],
        "store": "memory://",
        "datadir": datadir,  # the tables live in memory; faust still wants a folder
        "autodiscover": False,
        "processing_guarantee": "at_least_once",
        # A fresh app starts at the newest samples: old ones describe workers long gone.
        "consumer_auto_offset_reset": "latest",
        "table_standby_replicas": sysinfo.standby_replicas,
        "topic_replication_factor": config.replication_factor or topology.replication,
        "topic_disable_leader": True,
        "broker_session_timeout": sysinfo.session_timeout_s,
        "broker_heartbeat_interval": max(0.2, sysinfo.session_timeout_s / 6),
        "broker_rebalance_timeout": max(10.0, 2 * sysinfo.session_timeout_s),
        **web_settings(config),
    }
    credentials = _credentials(config)
    if credentials is not None:
        settings["broker_credentials"] = credentials
    return settings


def faust_app(config: Config, topology: Topology, datadir: str) -> faust.App:
    """The replica's faust.App, its stalled-stream checks counted from each rebalance."""
    app = faust.App(**faust_settings(config, topology, datadir))
    app.sensors.add(ChecksSinceRebalance())
    return app


def _credentials(config: Config) -> Any:
    if config.sasl_mechanism:
        context = config.aiokafka_config().get("ssl_context")
        return faust.SASLCredentials(username=config.sasl_username,
                                     password=config.sasl_password,
                                     mechanism=config.sasl_mechanism, ssl_context=context)
    if "SSL" in config.security_protocol:
        return faust.SSLCredentials(config.aiokafka_config()["ssl_context"])
    return None


def _tables_folder() -> str:
    """A new temporary folder for Faust's tables; those of replicas killed with SIGKILL on
    this host (which no `run` removed) are removed first."""
    return tempfile.mkdtemp(prefix=claim(tempfile.gettempdir(), "inferstream-sysinfo-") + "-")


class SysinfoApp:
    """One replica of the sysinfo app: the Faust app, its tables, agents, timer and pages."""

    def __init__(self, config: Config, topology: Topology, metrics: SysinfoMetrics,
                 codec: Codec | None = None) -> None:
        self.config = config
        self.sysinfo = config.sysinfo
        self.topology = topology
        self.metrics = metrics
        self.codec = codec or Codec.for_config(config)
        self._datadir = _tables_folder()
        #: removes it after `run`, or when an app that never ran is dropped, or at exit
        self.remove_datadir = weakref.finalize(self, shutil.rmtree, self._datadir,
                                               ignore_errors=True)
        self.app = faust_app(config, topology, self._datadir)
        raw: dict[str, Any] = {"key_type": bytes, "value_type": bytes,
                               "key_serializer": "raw", "value_serializer": "raw"}
        self.sysinfo_topic = self.app.topic(config.topic("sysinfo"), **raw)
        self.fleet_topic = self.app.topic(config.topic("sysinfo-fleet"), partitions=1,
                                          internal=True, retention=FLEET_RETENTION_MS / 1000, **raw)
        self.policy_topic = self.app.topic(config.topic("policy"), **raw)
        self.dlq_topic = self.app.topic(config.topic("dlq"), **raw)
        tables: dict[str, Any] = {"key_type": str}  # keys and values are JSON
        self.aggregates = self.app.Table(AGGREGATES_TABLE, default=None,
                                         partitions=topology.sysinfo_partitions, **tables)
        self.workers = self.app.Table(WORKERS_TABLE, default=None, partitions=1, **tables)
        self.fleet = Fleet(self.sysinfo, self.workers,
                           task_partitions=config.task_partitions_for)
        self.fleet.check_strategies()
        self._owner = False
        #: the pools this replica has reported as owner (kept at 0 once their workers go)
        self._pools_seen: set[str] = set()
        self._fleet_offset = -1
        self._rebalances = 0
        self._rebalance_started: int | None = None
        self._takeover_position: int | None = None
        self._last_input = time.monotonic()
        self.app.agent(self.sysinfo_topic, name="sysinfo-intake")(self._intake)
        self.app.agent(self.fleet_topic, name="sysinfo-fleet")(self._fleet)
        self.app.timer(self.sysinfo.policy_interval_s, name="sysinfo-policy")(self._tick)
        from inferstream.sysinfo.web import add_pages

        add_pages(self)

    def run(self) -> int:
        """Run the replica until SIGTERM or SIGINT (drain, leave the group, exit 0) or, in
        bounded mode, until no sample came for `idle_exit_s`; returns the exit status.
        AuthorizationError (one line) where the cluster refused it an ACL meanwhile."""
        self.declare_internal_topics()
        bound_faust_stop(self.config.sysinfo_app_id(), self.config.connect_timeout_s)
        worker = faust.Worker(self.app, quiet=True, redirect_stdouts=False,
                              override_logging=False)
        worker.spinner = None  # it writes terminal escapes into logs that are no terminal
        exit_at_a_second_signal(worker)
        try:
            with quiet_refusals():
                worker.execute_from_commandline()
        except SystemExit as exc:  # mode ends every run with SystemExit(status)
            refused = refusal(self.config, worker.crash_reason)
            if refused is not None:
                raise refused from worker.crash_reason
            return int(exc.code or 0)
        finally:
            self.remove_datadir()
        return 0

    def declare_internal_topics(self) -> None:
        """Create the app's own topics (the fleet topic, the tables' changelogs) before Faust
        starts. Faust creates them itself, but when its first assignment comes before the
        brokers show them it logs "Ignoring missing topic" and its agents and tables never
        get those partitions: the replica then writes no policy at all (seen on a loaded
        host with faust-streaming 0.11). Topics that exist are left as they are."""
        from inferstream.kafka.topics import TopicSpec, admin_client, create_missing

        # The broker deletes only closed segments: at its default roll (7 days, or 1 GiB) the
        # hour of retention kept every record of the week. The changelogs are compacted, and
        # roll as every compacted topic does (`COMPACTED_SEGMENT_MS`).
        specs = [TopicSpec(self.fleet_topic.get_topic_name(), 1,
                           configs={"retention.ms": str(FLEET_RETENTION_MS),
                                    "segment.ms": str(FLEET_RETENTION_MS // 6)})]
        for table, partitions in ((self.aggregates, self.topology.sysinfo_partitions),
                                  (self.workers, 1)):
            specs.append(TopicSpec(table.changelog_topic.get_topic_name(), partitions,
                                   compacted=True))
        create_missing(admin_client(self.config), specs, self.topology.replication)

    # -- stage 1: samples -------------------------------------------------------------------------
    async def _intake(self, stream: Any) -> None:
        async for event in stream.events():
            self._last_input = time.monotonic()
            try:
                await self.on_sysinfo(event.message)
            except Exception:  # the app never stops on input: log, count, go on
                log.exception("sysinfo record partition=%d offset=%d failed",
                              event.message.partition, event.message.offset)
                self.metrics.samples.labels("error").inc()

    async def on_sysinfo(self, message: Any) -> None:
        """Handle one record of the sysinfo topic (a faust Message)."""
        outcome = read_sample(self.codec, message.value, now_ms(), self.sysinfo.max_future_s)
        if outcome.dead_letter is not None:
            await self._dead_letter(message, outcome.dead_letter)
            return
        if outcome.sample is None:
            log.debug("dropped sample partition=%d offset=%d reason=%s",
                      message.partition, message.offset, outcome.dropped)
            self.metrics.samples.labels("dropped").inc()
            self.metrics.dropped.labels(outcome.dropped or "absurd").inc()
            return
        sample = outcome.sample
        worker = sample["worker"]
        previous: dict[str, ModelAggregate] = {}
        for perf in performances(sample):
            ref = performance_ref(perf)
            found = self.aggregates.get(aggregate_key(worker, ref))
            if found is not None:
                previous[ref] = found
        record = record_of(sample, previous, now_ms(), self.sysinfo)
        for model, aggregate in record["perf"].items():
            self.aggregates[aggregate_key(worker, model)] = aggregate
        await self.fleet_topic.send(key=worker.encode(), value=json.dumps(record).encode())
        self.metrics.samples.labels("ok").inc()

    async def _dead_letter(self, message: Any, reason: str) -> None:
        log.warning("undecodable sysinfo record partition=%d offset=%d reason=%s",
                    message.partition, message.offset, reason)
        letter = dead_letter(
            self.codec, self.config.topic("dlq"), self.topology.dlq_partitions,
            topic=message.topic, partition=message.partition, offset=message.offset,
            reason=reason, value=message.value, consumer=self.app.conf.id, key=message.key,
            origin_timestamp_ms=int(message.timestamp * 1000) if message.timestamp else None)
        await self.dlq_topic.send(key=letter.key, value=letter.value, partition=letter.partition)
        self.metrics.samples.labels("dead_letter").inc()
        self.metrics.dead_letters.inc()

    # -- stage 2: the fleet and the policy --------------------------------------------------------
    async def _fleet(self, stream: Any) -> None:
        async for event in stream.events():
            self._fleet_offset = event.message.offset
            try:
                record: WorkerRecord = json.loads(event.value)
                self.fleet.observe(record)
                for worker in self.fleet.prune(now_ms()):  # here: the table may be written
                    log.info("forgot worker=%s silent past forget_after_s", worker)
            except (ValueError, KeyError, TypeError):
                log.exception("unreadable fleet record")

    def owns_fleet(self) -> bool:
        """Whether this replica actively owns the workers table (and so writes the policy)."""
        app = self.app
        if app.rebalancing or getattr(app, "in_recovery", False):
            return False
        return self._fleet_tp() in app.consumer.assignment()

    def _fleet_tp(self) -> TP:
        return TP(self.fleet_topic.get_topic_name(), 0)

    def _note_rebalance(self) -> None:
        """While the group rebalances, and once after, restart every worker's silence clock:
        the samples the moved partitions held come late, not never."""
        count = self.app.rebalancing_count
        if self.app.rebalancing or count != self._rebalances:
            now = now_ms()
            if self._rebalance_started is None:
                self._rebalance_started = now
            self._rebalances = count
            self.fleet.rebalanced(self._rebalance_started, now)
        else:
            self._rebalance_started = None

    def caught_up(self) -> bool:
        """Whether the fleet agent has read every record forwarded so far: a new owner judges
        workers by their records only then, not by what it held before the failover."""
        highwater = self.app.consumer.highwater(self._fleet_tp())
        if highwater is None or highwater <= 0 or self._fleet_offset >= highwater - 1:
            return True
        start = self._takeover_position  # nothing was left to read when we took over
        return start is not None and start >= highwater

    async def _take_over(self) -> None:
        self.fleet.hysteresis.forget()  # a new owner writes every entry once
        try:
            self._takeover_position = await self.app.consumer.position(self._fleet_tp())
        except Exception:  # not yet positioned (aiokafka raises IllegalStateError): wait
            log.debug("fleet position unknown at takeover", exc_info=True)
            self._takeover_position = None

    async def _tick(self) -> None:
        try:
            await self.tick()
        except Exception as exc:  # the next round rewrites everything; the app goes on
            refused = refused_by_acl(exc)
            if refused is not None:  # ... unless no round can: stop in words (`run`)
                await self.app.crash(refused)
                return
            log.exception("policy round failed")
            self.fleet.hysteresis.forget()

    async def tick(self) -> None:
        """One policy round: note rebalances, follow ownership, write what changed."""
        self._check_idle()
        self._note_rebalance()
        owner = self.owns_fleet()
        if owner != self._owner:
            log.info("policy owner=%s workers=%d", owner, len(self.fleet.records))
            self._owner = owner
            self.metrics.owner.set(int(owner))
            if owner:
                await self._take_over()
            else:  # the new owner reports the fleet; stale gauges here would hide its news
                self.metrics.clear_fleet()
        if not owner or not self.caught_up():
            return
        await self.write_policy(self.fleet.policy_to_write(now_ms()))
        for strategy, seconds in self.fleet.strategy_runs:
            self.metrics.strategy_time.labels(strategy).observe(seconds)
        self._count_workers()

    async def write_policy(self, entries: list[PolicyEntry]) -> None:
        for entry in entries:
            value = self.codec.encode("PolicyEntry", plain_record(PolicyEntry, entry))
            await self.policy_topic.send(key=policy_key(entry).encode(), value=value)
            self.metrics.policy_writes.labels(entry["pool"]).inc()
        self.fleet.mark_written(entries)
        if entries:
            log.info("policy wrote entries=%d", len(entries))

    def _count_workers(self) -> None:
        """The workers by health, and the plan's share and capacity of each (set anew); a
        pool whose workers were all forgotten stays, at 0, so its alert does not resolve."""
        metrics = self.metrics
        metrics.clear_fleet()
        pools = self.fleet.views(now_ms())
        self._pools_seen |= set(pools)
        for pool in self._pools_seen:
            views = pools.get(pool, [])
            for health in WorkerHealth:
                count = sum(1 for v in views if v.health == health)
                metrics.workers.labels(pool, str(health)).set(count)
            metrics.stale.labels(pool).set(
                sum(1 for v in views if v.health != WorkerHealth.HEALTHY))
        for entry in self.fleet.planned.values():
            if entry["kind"] == PolicyKind.WORKER:
                metrics.share.labels(entry["pool"], entry["worker"]).set(entry["share"])
                metrics.capacity.labels(entry["pool"], entry["worker"]).set(
                    entry["capacity_items_per_s"])

    def _check_idle(self) -> None:
        idle_exit_s = self.sysinfo.idle_exit_s
        if idle_exit_s is not None and time.monotonic() - self._last_input > idle_exit_s:
            log.info("no sample for %gs: exiting (bounded mode)", idle_exit_s)
            signal.raise_signal(signal.SIGTERM)
            self._last_input = float("inf")
