"""The [worker] section of Config: `inferstream worker` settings (also a stream member's model,
batching, device and group settings), from TOML, `INFERSTREAM_WORKER_<NAME>` and flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferstream.config.fields import at_least as _at_least
from inferstream.config.fields import check_port, idle_exit, metrics_addr, metrics_port, setting
from inferstream.errors import ConfigError

GUARANTEES = ("exactly-once", "at-least-once")
#: How a pool's partitions are shared: `policy.PolicyAssignor`, or aiokafka's own.
ASSIGNORS = ("policy", "roundrobin")
#: The forward pass's options (`models.forward`, which needs torch: kept apart here).
AUTO_ON_OFF = ("auto", "on", "off")
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
SWITCH = ("on", "off")
#: The built-in collectors of `serving.collectors`, all on by default.
DEFAULT_COLLECTORS = ("cpu", "memory", "accelerator", "models", "queue", "software")


@dataclass(frozen=True)
class WorkerConfig:
    """`inferstream worker`: one member of a pool's consumer group ([worker] in TOML)."""

    models: tuple[str, ...] = setting(
        (), "a model to serve, by registry name, e.g. efficientnet_lite0 (repeatable; "
        "at least one)", flag="--model", metavar="NAME")
    model_repository: str = setting(
        "", "a model repository, a folder or file:// URI, whose models --model may name "
        "besides the built-in ones; INFERSTREAM_MODEL_REPOSITORY too (empty: none; "
        "docs/model-repository.md)", metavar="DIR", env="INFERSTREAM_MODEL_REPOSITORY")
    allow_python_models: bool = setting(
        False, "serve repository models whose version is a Python handler (model.py): code "
        "of the model's author, run inside the worker")
    model_versions: int = setting(
        2, "versions of each repository model served at once: the newest K in its folder "
        "(a model card's [versions] latest sets its own); a job runs on one of them "
        "(docs/model-versions.md)")
    repository_poll_s: float = setting(
        30.0, "seconds between looks at the model repository for new versions, which are "
        "loaded beside the served ones without a restart (SIGHUP: look now; 0: only on "
        "SIGHUP)")
    retired_version_idle_s: float = setting(
        60.0, "seconds a version that falls outside the version policy stays loaded after "
        "the last task that names it came (a job that runs on it keeps its version; its "
        "memory is held that long; 0: unloaded once none of its tasks is in flight)")
    load_on_demand: bool = setting(
        False, "also load other registry models when a task asks for them")
    max_loaded_models: int = setting(
        2, "most models loaded at once with load_on_demand (idle ones are unloaded first)")
    device: str = setting("auto", "auto, cpu, cuda or cuda:N")
    max_batch: int = setting(32, "most items per model batch")
    max_wait_ms: float = setting(10.0, "longest wait for a batch to fill after its first item")
    latency_target_ms: float | None = setting(
        None, "tune the batch size (at most max_batch) and the wait (at most max_wait_ms) "
        "online so that an item's wait for its batch plus the batch's forward pass stays "
        "under this (AIMD; none: the fixed max_batch and max_wait_ms)")
    torch_threads: int = setting(
        0, "torch intra-op threads of the forward pass (0: derived, every core on a CPU "
        "device and 1 on CUDA; logged at start)")
    decode_threads: int = setting(
        0, "threads that fetch and preprocess items (0: derived, one per four cores on a "
        "CPU device and every core but one on CUDA; logged at start)")
    allocator: str = setting(
        "auto", "malloc of the worker: auto (the system's jemalloc or tcmalloc where found, "
        "else glibc), system (glibc) or a library's path; preloaded by re-executing the "
        "worker once at start")
    compile: str = setting(
        "auto", "graph mode of the forward pass: auto (compiled with AOTInductor, kept where "
        "it runs at least as fast as eager, timed when compiled), on (compiled wherever it "
        "compiles), off (eager); a model that does not compile runs eager", choices=AUTO_ON_OFF)
    compile_background: str = setting(
        "on", "where no compiled forward pass is kept (a first start), serve eager at once "
        "and compile in a child process meanwhile, switching between two batches when it is "
        "ready (and, under compile auto, measured faster); off: the worker starts serving "
        "once it has compiled", choices=SWITCH)
    compile_cache_dir: str = setting(
        "", "where compiled forward passes are kept between starts, so that a restart loads "
        "one in seconds instead of compiling it again (empty: TORCHINDUCTOR_CACHE_DIR, else "
        "~/.cache/inferstream/torch-compile)")
    precision: str = setting(
        "auto", "numbers of the forward pass: auto (fp16 on CUDA, fp32 on a CPU), fp32, fp16 "
        "or bf16 (fast on CPUs with AVX512-BF16 or AMX)", choices=PRECISIONS)
    channels_last: str = setting(
        "on", "channels-last weights and batches, which fast convolutions want",
        choices=SWITCH)
    decode_on_device: str = setting(
        "auto", "JPEGs decoded where the model runs (nvJPEG on CUDA), the decode threads only "
        "reading headers: auto (on CUDA where it measures faster at start), on, off",
        choices=AUTO_ON_OFF)
    decode_ahead: int = setting(
        2, "batches decoded ahead of the model: decoding fills the forward pass's gaps "
        "instead of taking the cores in bursts")
    http_timeout_s: float = setting(10.0, "timeout of one http(s) item fetch")
    max_item_bytes: int = setting(64 * 1024 * 1024, "largest item the worker reads")
    metrics_port: int | None = metrics_port()
    metrics_addr: str = metrics_addr()
    weights: str | None = setting(None, "weights file of the first --model (empty: searched)")
    random_weights: bool = setting(False,
                                   "random weights when none are found (benchmarks only)")
    worker_id: str = setting("", "name in results and metrics (empty: host-pid); with "
                             "--members N, each member's is <id>-<i>")
    members: int = setting(
        1, "independent group members in this process, each with its own worker id, "
        "consumer, producers, collectors and model (simulated nodes for scale studies)")
    instance_id: str | None = setting(None, "static group membership id")
    session_timeout_ms: int = setting(
        10_000, "a worker silent this long is dead and loses its partitions")
    heartbeat_interval_ms: int = setting(1_000, "group heartbeat interval")
    max_poll_interval_ms: int = setting(
        300_000, "longest gap between fetches; must exceed the slowest batch")
    guarantee: str = setting("exactly-once",
                             "exactly-once: results and offsets in one transaction",
                             choices=GUARANTEES)
    idle_exit_s: float | None = idle_exit("with nothing to do")
    revoke_grace_s: float = setting(
        10.0, "how long the revoked partitions may take to commit their in-flight tasks, "
        "all together (a commit still under way then is given up; the next owner redoes its "
        "tasks)")
    commit_window_ms: float = setting(
        10.0, "how long a partition's finished task waits for the tasks behind it to finish, "
        "so that they commit in one transaction (the broker's cost is per transaction; a "
        "failed one redoes all of its tasks; 0: commit what is finished at once)")
    commit_max_tasks: int = setting(
        32, "most tasks (stream: records) committed in one transaction (1: one each)")
    sysinfo_interval_s: float | None = setting(
        2.0, "seconds between system-information samples to the sysinfo topic (0: none)",
        flag="--sysinfo-interval", metavar="SECONDS")
    announce_interval_s: float = setting(
        5.0, "inferstream worker: seconds between the announcements, on the workers topic, "
        "that it is starting with its models, from before they load until it joins its "
        "group; the controller holds their tasks meanwhile (0: none)")
    collectors: tuple[str, ...] = setting(
        DEFAULT_COLLECTORS, "a collector to run, built-in or registered by entry point "
        "inferstream.collectors (repeatable; replaces the default list)", flag="--collector",
        metavar="NAME")
    calibration_items: int = setting(
        8, "items in each served model's calibration batch, run at start and when a model "
        "is loaded (0: no calibration)")
    assignor: str = setting(
        "policy", "policy: partitions in proportion to the policy's capacity shares; "
        "roundrobin: aiokafka's equal shares", choices=ASSIGNORS)
    rebalance_threshold: float = setting(
        0.15, "the leader rebalances when a member's share moves by more than this "
        "fraction of it, or a member turns unhealthy")
    min_rebalance_interval_s: float = setting(
        30.0, "least time between two policy-triggered rebalances")
    policy_max_age_s: float = setting(
        90.0, "a pool policy older than this is ignored (sysinfo not running): even shares")

    @property
    def max_in_flight_items(self) -> int:
        return 4 * self.max_batch + 64


def validate_worker(worker: WorkerConfig) -> None:
    for name, allowed in (("guarantee", GUARANTEES), ("assignor", ASSIGNORS),
                          ("compile", AUTO_ON_OFF), ("decode_on_device", AUTO_ON_OFF),
                          ("precision", PRECISIONS), ("compile_background", SWITCH),
                          ("channels_last", SWITCH)):
        if getattr(worker, name) not in allowed:
            raise ConfigError(f"worker.{name} {getattr(worker, name)!r} is not one of {allowed}")
    for name in ("max_batch", "decode_ahead", "max_item_bytes", "session_timeout_ms",
                 "max_loaded_models", "members", "model_versions", "commit_max_tasks",
                 "heartbeat_interval_ms", "max_poll_interval_ms"):
        _at_least(f"worker.{name}", getattr(worker, name), 1)
    for name in ("torch_threads", "decode_threads",
                 "max_wait_ms", "http_timeout_s", "idle_exit_s", "revoke_grace_s",
                 "commit_window_ms",
                 "sysinfo_interval_s", "announce_interval_s", "calibration_items",
                 "repository_poll_s", "retired_version_idle_s",
                 "rebalance_threshold", "min_rebalance_interval_s", "policy_max_age_s"):
        _at_least(f"worker.{name}", getattr(worker, name), 0)
    if worker.latency_target_ms is not None and worker.latency_target_ms <= 0:
        raise ConfigError(f"worker.latency_target_ms must be > 0, got {worker.latency_target_ms:g}")
    if worker.heartbeat_interval_ms >= worker.session_timeout_ms:
        raise ConfigError("worker.heartbeat_interval_ms must be below worker.session_timeout_ms")
    check_port("worker.metrics_port", worker.metrics_port)
