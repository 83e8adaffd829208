"""`inferstream worker`: one inference worker of a pool; its settings are `WorkerConfig`."""

from __future__ import annotations

import argparse
import asyncio

from inferstream.config import Config
from inferstream.kafka.preflight import Needs
from inferstream.signals import dump_stacks_on_usr1, when_stopping


def needs(config: Config) -> Needs:
    """A model, collectors that load, the pool's task topic and the worker's own topics."""
    from inferstream.serving.process import check_serving

    check_serving(config, "worker")
    return Needs(librdkafka=False, aiokafka=True,
                 topics=(config.task_topic(), *config.topics("results", "dlq", "sysinfo",
                                                             "policy")),
                 metrics_port=config.worker.metrics_port)


def run(args: argparse.Namespace, config: Config) -> int:
    from inferstream.serving.process import prepare_process

    settings = config.worker  # a model and known collectors: checked with the worker's needs
    device = prepare_process(settings)  # first: it may re-execute the process
    from prometheus_client import CollectorRegistry

    from inferstream.metrics import serve_metrics
    from inferstream.serving.loader import model_loader
    from inferstream.serving.loop import default_worker_id
    from inferstream.serving.process import serve_until_stopped
    from inferstream.worker.metrics import WorkerMetrics
    from inferstream.worker.source import new_worker

    dump_stacks_on_usr1()
    worker_id = settings.worker_id or default_worker_id()
    metrics = WorkerMetrics(CollectorRegistry(), worker_id, config.pool)
    loader = model_loader(settings, device, metrics)
    if settings.members == 1:
        models = [loader(name) for name in dict.fromkeys(settings.models)]
        worker = new_worker(config, models, hooks=metrics, loader=loader)
    if settings.metrics_port:
        # the port was checked free by preflight
        serve_metrics(metrics.registry, settings.metrics_port, settings.metrics_addr)
    if settings.members == 1:
        asyncio.run(serve_until_stopped(worker))
        return 0
    from inferstream.worker.members import member_configs, run_members, tag_logs

    tag_logs()
    members = [new_worker(member, [loader(name) for name in dict.fromkeys(settings.models)],
                          hooks=metrics.for_worker(member.worker.worker_id), loader=loader)
               for member in member_configs(config, worker_id)]
    asyncio.run(run_members(members, when_stopping))
    return 0
