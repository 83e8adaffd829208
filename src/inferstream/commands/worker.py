"""`inferstream worker`: one inference worker of a pool; its settings are `WorkerConfig`."""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
from typing import TYPE_CHECKING

from inferstream.commands.signals import when_stopping
from inferstream.config import Config

if TYPE_CHECKING:
    from inferstream.streams.worker.worker import Worker


def dump_stacks_on_usr1() -> None:
    """`kill -USR1 PID` prints every thread's stack to stderr: where a hung process waits."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def run(args: argparse.Namespace, config: Config) -> int:
    from inferstream.commands.serving import prepare_process

    settings = config.worker  # a model and known collectors: checked with the worker's needs
    device = prepare_process(settings)  # first: it may re-execute the process
    from prometheus_client import CollectorRegistry

    from inferstream.metrics import WorkerMetrics, serve_metrics
    from inferstream.streams.worker.loader import model_loader
    from inferstream.streams.worker.worker import Worker, default_worker_id

    dump_stacks_on_usr1()
    worker_id = settings.worker_id or default_worker_id()
    metrics = WorkerMetrics(CollectorRegistry(), worker_id, config.pool)
    loader = model_loader(settings, device, metrics)
    if settings.members == 1:
        models = [loader(name) for name in dict.fromkeys(settings.models)]
        worker = Worker(config, models, hooks=metrics, loader=loader)
    if settings.metrics_port:
        # the port was checked free by preflight
        serve_metrics(metrics.registry, settings.metrics_port, settings.metrics_addr)
    if settings.members == 1:
        asyncio.run(serve_until_stopped(worker))
        return 0
    from inferstream.streams.worker.members import member_configs, run_members, tag_logs

    tag_logs()
    members = [Worker(member, [loader(name) for name in dict.fromkeys(settings.models)],
                      hooks=metrics.for_worker(member.worker.worker_id), loader=loader)
               for member in member_configs(config, worker_id)]
    asyncio.run(run_members(members, when_stopping))
    return 0


async def serve_until_stopped(worker: Worker) -> None:
    """SIGTERM and SIGINT make the worker drain: finish, commit, leave the group, return
    (before it has joined: give up the start). Not through `loop.add_signal_handler`, which
    would take over the wakeup fd that `commands.signals` watches."""
    loop = asyncio.get_running_loop()
    when_stopping(lambda: loop.call_soon_threadsafe(worker.request_stop))
    await worker.run()
