"""`inferstream stream`: one member of a stream's group; its settings are `StreamConfig` and
the worker's (`WorkerConfig`: model, batching, device, group timeouts, bounded mode)."""

from __future__ import annotations

import argparse
import asyncio

from inferstream.commands.worker import dump_stacks_on_usr1, serve_until_stopped
from inferstream.config import Config


def run(_args: argparse.Namespace, config: Config) -> int:
    from inferstream.commands.serving import prepare_process

    settings = config.worker  # one model, complete settings: checked by stream_needs
    device = prepare_process(settings)  # first: it may re-execute the process
    from prometheus_client import CollectorRegistry

    from inferstream.metrics import StreamMetrics, serve_metrics
    from inferstream.streams.stream.member import StreamMember, stream_config
    from inferstream.streams.worker.loader import model_loader
    from inferstream.streams.worker.worker import default_worker_id

    dump_stacks_on_usr1()
    metrics = StreamMetrics(CollectorRegistry(), settings.worker_id or default_worker_id(),
                           stream_config(config).pool)
    load = model_loader(settings, device, metrics)
    model = load(settings.models[0])
    member = StreamMember(config, model, hooks=metrics)
    if settings.metrics_port:
        # the port was checked free by preflight
        serve_metrics(metrics.registry, settings.metrics_port, settings.metrics_addr)
    asyncio.run(serve_until_stopped(member))
    return 0
