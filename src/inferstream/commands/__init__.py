"""The subcommands of `inferstream`, one module per command group.

Each command has its own arguments (`add_args`), the `Config` section whose settings are its
flags, if any, and the function that runs it with the process's Config.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from inferstream.commands import admin, client, controller, sysinfo, worker
from inferstream.config import Config


@dataclass(frozen=True)
class Command:
    help: str
    add_args: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Config], int]
    section: str | None = None


def _no_args(_parser: argparse.ArgumentParser) -> None:
    """A command whose flags are all settings."""


COMMANDS: dict[str, Command] = {
    "config": Command("print the effective configuration, secrets masked",
                      admin.config_args, admin.config_show),
    "topics": Command("create or check every inferstream topic", admin.topics_args,
                      admin.topics),
    "worker": Command("run an inference worker of a pool", _no_args, worker.run, "worker"),
    "controller": Command("run a controller replica", _no_args, controller.run, "controller"),
    "sysinfo": Command("run a replica of the sysinfo app (policy table, HTTP data access)",
                       _no_args, sysinfo.run, "sysinfo"),
    "submit": Command("submit a job", client.submit_args, client.submit),
    "status": Command("show job status", client.status_args, client.status),
    "results": Command("write a job's output lines", client.results_args, client.results),
}
