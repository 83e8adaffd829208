"""`inferstream stream`: one member of a stream's group; its settings are `StreamConfig` and
the worker's (`WorkerConfig`: model, batching, device, group timeouts, bounded mode)."""

from __future__ import annotations

import argparse
import asyncio

from inferstream.config import Config
from inferstream.errors import ConfigError
from inferstream.kafka.preflight import Needs
from inferstream.serving.process import serve_until_stopped
from inferstream.signals import dump_stacks_on_usr1


def needs(config: Config) -> Needs:
    """A stream member: the worker's checks, its complete settings, the stream's topics."""
    from inferstream.serving.process import check_serving

    check_serving(config, "stream")
    if len(set(config.worker.models)) != 1:
        raise ConfigError("a stream runs one model: give --model NAME once")
    stream = config.stream
    stream.check_complete()
    if stream.input_format == "avro":
        from inferstream.stream.formats import AvroEnvelope

        AvroEnvelope(config)  # the writer schema file reads, or a registry is set
    dlq = (stream.dead_letter_topic or config.topic("dlq"),) if stream.on_error == "dlq" else ()
    ours = (config.topic("dlq"),) if dlq == (config.topic("dlq"),) else ()
    return Needs(librdkafka=False, aiokafka=True,
                 topics=(*ours, *config.topics("sysinfo", "policy")),
                 user_topics=(stream.input_topic, stream.output_topic,
                              *(t for t in dlq if t not in ours)),
                 metrics_port=config.worker.metrics_port,
                 metrics_addr=config.worker.metrics_addr, role="stream",
                 groups=(stream.group_id(config.topic_prefix), config.reader_group()))


def run(_args: argparse.Namespace, config: Config) -> int:
    from inferstream.serving.process import prepare_process

    settings = config.worker  # one model, complete settings: checked by stream_needs
    device = prepare_process(settings)  # first: it may re-execute the process
    from prometheus_client import CollectorRegistry

    from inferstream.serving.health import HealthHooks, serve_health
    from inferstream.serving.hooks import HookChain
    from inferstream.serving.loader import model_loader
    from inferstream.serving.loop import default_worker_id
    from inferstream.stream.metrics import StreamMetrics
    from inferstream.stream.source import new_member, stream_config

    dump_stacks_on_usr1()
    member_id = settings.worker_id or default_worker_id()
    metrics = StreamMetrics(CollectorRegistry(), member_id, stream_config(config).pool,
                            config.stream.input_topic)
    health = serve_health(config, metrics.registry, "loading the model")
    load = model_loader(settings, device, metrics)
    model = load(settings.models[0])
    group = config.stream.group_id(config.topic_prefix)
    member = new_member(config, model, hooks=HookChain(
        metrics, HealthHooks(health, f"stream member {member_id}", group)))
    health.done()
    asyncio.run(serve_until_stopped(member))
    return 0
