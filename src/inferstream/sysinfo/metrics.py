"""Prometheus metrics of a sysinfo replica, built as one bundle from an injected registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferstream.supervise.child import count_restarts


class SysinfoMetrics:
    """What the sysinfo app counts: samples by outcome, drops, dead letters, policy writes,
    workers by health, the strategies' run time, and each worker's share and capacity."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.restarts = count_restarts(registry, "sysinfo")
        self.samples = Counter(
            "inferstream_sysinfo_samples_total", "Sysinfo records read, by outcome",
            ["outcome"], registry=registry)
        self.dropped = Counter(
            "inferstream_sysinfo_samples_dropped_total",
            "Readable samples dropped for absurd values, by reason", ["reason"],
            registry=registry)
        self.dead_letters = Counter(
            "inferstream_sysinfo_dead_letters_total",
            "Sysinfo records sent to the dead-letter topic", registry=registry)
        self.policy_writes = Counter(
            "inferstream_policy_entries_written_total", "PolicyEntry records written, by pool",
            ["pool"], registry=registry)
        self.workers = Gauge(
            "inferstream_sysinfo_workers", "Workers known to the policy owner, by health",
            ["pool", "health"], registry=registry)
        self.owner = Gauge(
            "inferstream_sysinfo_policy_owner",
            "1 while this replica owns the fleet table and writes the policy", registry=registry)
        self.stale = Gauge(
            "inferstream_sysinfo_stale_workers",
            "Workers of a pool whose samples stopped (STALE or GONE, not forgotten yet)",
            ["pool"], registry=registry)
        self.strategy_time = Histogram(
            "inferstream_sysinfo_strategy_duration_seconds",
            "Time one strategy took to plan one pool", ["strategy"],
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1), registry=registry)
        self.share = Gauge(
            "inferstream_policy_share", "A worker's planned share of its pool's partitions",
            ["pool", "worker"], registry=registry)
        self.capacity = Gauge(
            "inferstream_policy_capacity_items_per_second",
            "A worker's planned capacity in items/s", ["pool", "worker"], registry=registry)

    def clear_fleet(self) -> None:
        """Drop the gauges only the policy owner reports (workers, stale, share, capacity)."""
        for gauge in (self.workers, self.stale, self.share, self.capacity):
            gauge.clear()
