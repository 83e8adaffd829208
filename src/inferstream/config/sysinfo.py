"""`inferstream sysinfo` settings ([sysinfo] in TOML, `INFERSTREAM_SYSINFO_<NAME>`, flags)."""

from __future__ import annotations

from dataclasses import dataclass

from inferstream.config.fields import at_least, idle_exit, setting
from inferstream.errors import ConfigError


@dataclass(frozen=True)
class SysinfoConfig:
    """`inferstream sysinfo`: one replica of the Faust app that makes the policy table."""

    bind: str = setting("127.0.0.1", "address the HTTP server listens on (0.0.0.0: every "
                        "interface, for replicas and clients on other hosts)")
    port: int = setting(6066, "HTTP port of /workers, /policy, /sysinfo, /health, /metrics")
    advertised_host: str = setting(
        "", "host name other replicas reach this one by (empty: this host's name)")
    strategy: str = setting("throughput", "strategy of every pool without its own: throughput, "
                            "least-loaded, memory-aware, latency-slo or an entry point name")
    pool_strategies: tuple[str, ...] = setting(
        (), "a pool's own strategy (repeatable)", flag="--pool-strategy",
        metavar="POOL=STRATEGY")
    stale_intervals: float = setting(3.0, "a worker is STALE after this many missed intervals")
    gone_after_s: float = setting(30.0, "a worker silent this long is GONE")
    forget_after_s: float = setting(
        600.0, "a worker silent this long leaves the tables and /workers (its GONE entry stays)")
    hysteresis: float = setting(
        0.02, "a worker's entry is rewritten only when its share moves by more than this")
    refresh_s: float = setting(30.0, "every entry is rewritten at least this often")
    policy_interval_s: float = setting(1.0, "seconds between policy computations")
    ewma_alpha: float = setting(0.3, "weight of the newest sample in smoothed throughput")
    window_s: float = setting(60.0, "span of the windowed aggregates per (worker, model)")
    latency_slo_s: float = setting(
        0.5, "latency-slo: target p95 batch latency, seconds")
    task_seconds: float = setting(1.0, "recommended task size: items for this much work")
    history_size: int = setting(150, "samples kept per worker for /sysinfo/{worker}")
    max_future_s: float = setting(
        300.0, "a sample stamped further ahead than this is absurd and dropped")
    standby_replicas: int = setting(1, "standby copies of each table on other replicas")
    session_timeout_s: float = setting(
        6.0, "a replica silent this long leaves the group and its tables move")
    idle_exit_s: float | None = idle_exit("without a sample")

    def __post_init__(self) -> None:
        _validate(self)

    def strategy_for(self, pool: str) -> str:
        """The strategy name of `pool`: its own, else the default."""
        return self.strategy_map().get(pool, self.strategy)

    def strategy_map(self) -> dict[str, str]:
        return dict(_pair(item) for item in self.pool_strategies)


def _pair(item: str) -> tuple[str, str]:
    pool, sep, name = item.partition("=")
    if not sep or not pool.strip() or not name.strip():
        raise ConfigError(f"sysinfo.pool_strategies expects POOL=STRATEGY, got {item!r}")
    return pool.strip(), name.strip()


def _validate(sysinfo: SysinfoConfig) -> None:
    if not 0 < sysinfo.port < 65536:
        raise ConfigError(f"sysinfo.port {sysinfo.port} is not a TCP port")
    sysinfo.strategy_map()
    for name in ("stale_intervals", "gone_after_s", "forget_after_s", "refresh_s",
                 "policy_interval_s", "latency_slo_s", "task_seconds", "session_timeout_s",
                 "window_s"):
        at_least(f"sysinfo.{name}", getattr(sysinfo, name), 0.001)
    for name in ("hysteresis", "max_future_s", "idle_exit_s", "standby_replicas"):
        at_least(f"sysinfo.{name}", getattr(sysinfo, name), 0)
    at_least("sysinfo.history_size", sysinfo.history_size, 1)
    if not 0 < sysinfo.ewma_alpha <= 1:
        raise ConfigError(f"sysinfo.ewma_alpha must be in (0, 1], got {sysinfo.ewma_alpha:g}")
