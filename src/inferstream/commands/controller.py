"""`inferstream controller`: one controller replica; its settings are `ControllerConfig`."""

from __future__ import annotations

import argparse

from inferstream.commands.signals import when_stopping
from inferstream.commands.worker import dump_stacks_on_usr1
from inferstream.config import Config


def run(args: argparse.Namespace, config: Config) -> int:
    from inferstream.streams.controller.controller import Controller

    dump_stacks_on_usr1()
    controller = Controller(config)
    when_stopping(controller.request_stop)  # thread-safe: sets an Event
    controller.run()
    return 0
