"""`inferstream controller`: one controller replica; its settings are `ControllerConfig`."""

from __future__ import annotations

import argparse

from inferstream.config import Config
from inferstream.kafka.preflight import Needs
from inferstream.signals import dump_stacks_on_usr1, when_stopping


def needs(config: Config) -> Needs:
    return Needs(topics=config.topics("jobs", "results", "job-events", "controller-ledger",
                                      "dlq", "policy", "workers"),
                 metrics_port=config.controller.metrics_port,
                 metrics_addr=config.controller.metrics_addr, role="controller",
                 groups=(config.controller_group(), config.worker_group(),
                         config.reader_group()))


def run(args: argparse.Namespace, config: Config) -> int:
    from prometheus_client import CollectorRegistry

    from inferstream.controller.announcements import WorkerAnnouncements
    from inferstream.controller.health import ProbedMetrics
    from inferstream.controller.replica import Controller
    from inferstream.http import Health, HttpGuard
    from inferstream.metrics import serve_metrics
    from inferstream.policy.table import PolicyTable

    dump_stacks_on_usr1()
    health = Health()
    metrics = ProbedMetrics(CollectorRegistry(), health)
    settings = config.controller
    if settings.metrics_port:
        # the address and port were checked by preflight
        serve_metrics(metrics.registry, settings.metrics_port, settings.metrics_addr,
                      guard=HttpGuard.of(config), health=health)
    # Jobs without --chunk-size get the policy's task size (sysinfo's POOL entry), and their
    # tasks go to their model's partitions; a policy older than the workers'
    # policy_max_age_s is none, and the default size and all partitions apply.
    policy = PolicyTable(config, max_age_s=config.worker.policy_max_age_s)
    policy.start()
    # the workers that are starting: a task of their models waits for them (`waiting`); the
    # versions of the repository models each serves: a job runs on the newest (`versions`)
    announcements = WorkerAnnouncements(config)
    announcements.start()
    controller = Controller(config, policy=policy, hooks=metrics, starting=announcements,
                            versions=announcements)
    when_stopping(controller.request_stop)  # thread-safe: sets an Event
    try:
        controller.run()
    finally:
        policy.stop()
        announcements.stop()
    return 0
