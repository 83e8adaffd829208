"""`inferstream worker`: one inference worker of a pool; its settings are `WorkerConfig`.

Test hook: `INFERSTREAM_TEST_START_DELAY_S` (seconds, default none) makes the worker wait that
long after it announced itself starting and before it loads its models, a slow start (the
compile of a real model's forward pass) that tests can time."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from functools import partial
from typing import TYPE_CHECKING

from inferstream.config import Config
from inferstream.kafka.preflight import Needs
from inferstream.signals import dump_stacks_on_usr1, on_hangup, when_stopping

if TYPE_CHECKING:
    from inferstream.serving.loop import Worker
    from inferstream.worker.announce import StartAnnouncer

#: The test hook's environment variable (see the module's docstring).
START_DELAY_ENV = "INFERSTREAM_TEST_START_DELAY_S"


def needs(config: Config) -> Needs:
    """A model, collectors that load, the pool's task topic and the worker's own topics."""
    from inferstream.serving.process import check_serving

    check_serving(config, "worker")
    return Needs(librdkafka=False, aiokafka=True,
                 topics=(config.task_topic(), *config.topics("results", "dlq", "sysinfo",
                                                             "policy", "workers")),
                 metrics_port=config.worker.metrics_port,
                 metrics_addr=config.worker.metrics_addr, role="worker",
                 groups=(config.worker_group(), config.reader_group()))


def run(args: argparse.Namespace, config: Config) -> int:
    from inferstream.serving.process import prepare_process

    settings = config.worker  # a model and known collectors: checked with the worker's needs
    device = prepare_process(settings)  # first: it may re-execute the process
    from inferstream.serving.loop import default_worker_id
    from inferstream.worker.announce import StartAnnouncer
    from inferstream.worker.members import member_configs

    worker_id = settings.worker_id or default_worker_id()
    members = [config] if settings.members == 1 else member_configs(config, worker_id)
    # Before the models load (the compile takes a minute on a CPU), after the re-execution
    # (which would cut the announcer off): the controller holds this pool's tasks of them.
    announcer = StartAnnouncer(config, [m.worker.worker_id or worker_id for m in members])
    announcer.start()
    try:
        time.sleep(float(os.environ.get(START_DELAY_ENV) or 0))
        _serve(config, members, device, worker_id, announcer)
    finally:
        announcer.stop()
    return 0


def _serve(config: Config, members: list[Config], device: str, worker_id: str,
           announcer: StartAnnouncer) -> None:
    """Load the models and run the worker (or each of `--members`) until it stops."""
    from prometheus_client import CollectorRegistry

    from inferstream.serving.health import HealthHooks, serve_health
    from inferstream.serving.hooks import HookChain
    from inferstream.serving.loader import model_loader
    from inferstream.serving.process import serve_until_stopped
    from inferstream.serving.versions import start_models
    from inferstream.worker.metrics import WorkerMetrics
    from inferstream.worker.source import new_worker

    dump_stacks_on_usr1()
    settings = config.worker
    metrics = WorkerMetrics(CollectorRegistry(), worker_id, config.pool)
    health = serve_health(config, metrics.registry, "loading models")
    loader = model_loader(settings, device, metrics)
    if settings.members == 1:
        hooks = HookChain(metrics, announcer.hooks(worker_id),
                          HealthHooks(health, worker_id, config.worker_group()))
        worker = new_worker(config, start_models(settings, loader), hooks=hooks, loader=loader)
        health.done()
        on_hangup(worker.served.look_again)  # new versions of repository models: look now
        asyncio.run(serve_until_stopped(worker))
        return
    from inferstream.worker.members import member_metrics, run_members, tag_logs

    tag_logs()
    workers = [new_worker(member, start_models(settings, loader),
                          hooks=HookChain(own, announcer.hooks(member.worker.worker_id),
                                          HealthHooks(health, member.worker.worker_id,
                                                      member.worker_group())),
                          loader=loader)
               for member, own in zip(members, member_metrics(metrics, members), strict=True)]
    health.done()
    on_hangup(partial(_look_again, workers))
    asyncio.run(run_members(workers, when_stopping))


def _look_again(workers: list[Worker]) -> None:
    """SIGHUP: each worker looks at its model repository now."""
    for worker in workers:
        worker.served.look_again()
