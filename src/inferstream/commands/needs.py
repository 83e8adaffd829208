"""What each command's start-up checks verify: its client libraries and its topics."""

from __future__ import annotations

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.streams.kafka.preflight import Needs


def _topics(config: Config, *names: str) -> tuple[str, ...]:
    return tuple(config.topic(name) for name in names)


def cluster_needs(_config: Config) -> Needs:
    """The cluster answers (admin commands: they create or describe the topics)."""
    return Needs()


def _check_worker(config: Config, role: str) -> None:
    if not config.worker.models:
        raise ConfigError(f"the {role} needs a model: --model NAME "
                          "(or INFERSTREAM_WORKER_MODELS)")
    from inferstream.streams.worker.collectors import check_collectors  # worker only

    check_collectors(config.worker.collectors)  # before any connection: fail fast, in one line


def worker_needs(config: Config) -> Needs:
    _check_worker(config, "worker")
    return Needs(librdkafka=False, aiokafka=True,
                 topics=(config.task_topic(),
                         *_topics(config, "results", "dlq", "sysinfo", "policy")),
                 metrics_port=config.worker.metrics_port)


def stream_needs(config: Config) -> Needs:
    """A stream member: the worker's checks, its complete settings, the stream's topics."""
    _check_worker(config, "stream")
    if len(set(config.worker.models)) != 1:
        raise ConfigError("a stream runs one model: give --model NAME once")
    stream = config.stream
    stream.check_complete()
    if stream.input_format == "avro":
        from inferstream.streams.stream.formats import AvroEnvelope

        AvroEnvelope(config)  # the writer schema file reads, or a registry is set
    dlq = (stream.dead_letter_topic or config.topic("dlq"),) if stream.on_error == "dlq" else ()
    ours = (config.topic("dlq"),) if dlq == (config.topic("dlq"),) else ()
    return Needs(librdkafka=False, aiokafka=True,
                 topics=(*ours, *_topics(config, "sysinfo", "policy")),
                 user_topics=(stream.input_topic, stream.output_topic,
                              *(t for t in dlq if t not in ours)),
                 metrics_port=config.worker.metrics_port)


def controller_needs(config: Config) -> Needs:
    return Needs(topics=_topics(config, "jobs", "results", "job-events", "controller-ledger",
                                "dlq", "policy"),
                 metrics_port=config.controller.metrics_port)


def sysinfo_needs(config: Config) -> Needs:
    """The sysinfo app (Faust, on aiokafka) gets no pass-through settings: librdkafka's check
    covers the cluster and topics; its HTTP port must be free; its strategies must load."""
    from inferstream.streams.sysinfo.fleet import Fleet  # sysinfo only (no faust here)

    Fleet(config.sysinfo, {}).check_strategies()  # a wrong name fails before any connection
    return Needs(topics=_topics(config, "sysinfo", "policy", "dlq"),
                 metrics_port=config.sysinfo.port, port_flag="--port")


def submit_needs(config: Config) -> Needs:
    return Needs(topics=(*_topics(config, "jobs", "job-events", "results"),
                         config.task_topic()))


def status_needs(config: Config) -> Needs:
    return Needs(topics=_topics(config, "job-events"))


def results_needs(config: Config) -> Needs:
    return Needs(topics=_topics(config, "results", "job-events"))
