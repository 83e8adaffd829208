"""The subcommands of `inferstream`: each role's and the client's, from their own folders.

Each command has its own arguments (`add_args`), the `Config` section whose settings are its
flags, if any, the function that runs it with the process's Config, what its start-up checks
verify (`needs`: see `kafka.preflight`), whether it runs until stopped
(`long_running`: SIGTERM and SIGINT then work as `signals` says), and whether a supervising
parent restarts it when it dies (`supervised`: see `supervise`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from inferstream.client import acls_command, admin, dump_command, top
from inferstream.client import job_commands as client
from inferstream.config import Config
from inferstream.controller import run as controller
from inferstream.kafka.preflight import Needs
from inferstream.stream import run as stream
from inferstream.sysinfo import run as sysinfo
from inferstream.worker import models_command
from inferstream.worker import run as worker


@dataclass(frozen=True)
class Command:
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Config], int]
    section: str | None = None
    needs: Callable[[Config], Needs] | None = None
    long_running: bool = False
    supervised: bool = False
    #: sections whose flags the command takes besides its own (a stream's worker settings)
    also: tuple[str, ...] = ()

    @property
    def sections(self) -> tuple[str, ...]:
        return (*((self.section,) if self.section else ()), *self.also)


def _no_args(_parser: argparse.ArgumentParser) -> None:
    """A command whose flags are all settings."""


#: What `config check --role ROLE` checks: the start-up checks of that role's command.
ROLE_NEEDS: dict[str, Callable[[Config], Needs]] = {
    "worker": worker.needs, "controller": controller.needs, "sysinfo": sysinfo.needs,
    "stream": stream.needs, "client": client.submit_needs}


def _config(args: argparse.Namespace, config: Config) -> int:
    """`config show`, `config check` (every role's checks) or `config check --role ROLE`."""
    if args.action == "show":
        return admin.config_show(args, config)
    return admin.config_check(config, ROLE_NEEDS[args.role](config) if args.role else None)


COMMANDS: dict[str, Command] = {
    "config": Command("print the effective configuration (secrets masked), or check it",
                      admin.config_args, _config),
    "topics": Command("create or check every inferstream topic", admin.topics_args,
                      admin.topics, needs=admin.cluster_needs),
    "worker": Command("run an inference worker of a pool", _no_args, worker.run, "worker",
                      needs=worker.needs, long_running=True, supervised=True),
    "controller": Command("run a controller replica", _no_args, controller.run, "controller",
                          needs=controller.needs, long_running=True, supervised=True),
    "stream": Command("label every record of a topic into another, exactly once (a member of "
                      "the stream's group)", _no_args, stream.run, "stream", needs=stream.needs,
                      long_running=True, supervised=True, also=("worker",)),
    # long-running for its start-up: once Faust's worker runs, its own handlers take the
    # signals (and the wakeup fd) from `signals` and drain the app
    "sysinfo": Command("run a replica of the sysinfo app (policy table, HTTP data access)",
                       _no_args, sysinfo.run, "sysinfo", needs=sysinfo.needs,
                       long_running=True, supervised=True),
    "submit": Command("submit a job", client.submit_args, client.submit, needs=client.submit_needs),
    "status": Command("show job status", client.status_args, client.status,
                      needs=client.status_needs),
    "results": Command("write a job's output lines", client.results_args, client.results,
                       needs=client.results_needs),
    "cancel": Command("cancel a job: it ends CANCELLED with what was done", client.cancel_args,
                      client.cancel, needs=client.submit_needs),
    "acls": Command("print the least-privilege Kafka ACLs of each role for a principal, or "
                    "create them (--apply)", acls_command.acls_args, acls_command.acls,
                    also=("stream",)),
    "schemas": Command("write the Avro schemas of every inferstream record (for other clients)",
                       admin.schemas_args, admin.schemas),
    "dump": Command("print a topic's records as JSON lines, values decoded (jobs, results, "
                    "dlq, ... or any topic)", dump_command.dump_args, dump_command.dump,
                    needs=admin.cluster_needs),
    "top": Command("live view of the workers and pools the sysinfo app sees", top.top_args,
                   top.top),
    "models": Command("list the models of a model repository, or check that a worker could "
                      "serve each", models_command.models_args, models_command.models),
}
