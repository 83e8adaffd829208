"""Stream inference: the worker's pipeline on a topic that anyone writes (`member.py`), with
the record formats it reads and writes (`formats.py`).

From Python, `open_stream` builds a member; `await member.run()` runs it until
`member.request_stop()` (or, with `idle_exit_s`, until the input is quiet):

    member = open_stream(load_config(), model="efficientnet_lite0",
                         input_topic="uploads", output_topic="labels")
    asyncio.run(member.run())
"""

from __future__ import annotations

import dataclasses
from typing import Any

from inferstream.config import Config
from inferstream.models import LoadedModel
from inferstream.streams.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.streams.stream.member import StreamMember
from inferstream.streams.worker.hooks import WorkerHooks

__all__ = ["StreamMember", "open_stream"]


def open_stream(config: Config, model: str | LoadedModel | None = None, *,
                hooks: WorkerHooks | None = None, clients: KafkaClients = REAL_CLIENTS,
                **settings: Any) -> StreamMember:
    """A stream member of `config` with `settings` (fields of `StreamConfig`: input_topic,
    output_topic, input_format, ...) applied; `model` by name (loaded on the worker's
    `device`) or loaded, else the config's `worker.models[0]`."""
    config = dataclasses.replace(config, stream=dataclasses.replace(config.stream, **settings))
    config.stream.check_complete()
    if not isinstance(model, LoadedModel):
        from inferstream.models.registry import resolve_device
        from inferstream.streams.worker.loader import model_loader

        name = model or (config.worker.models[0] if config.worker.models else None)
        if name is None:
            from inferstream.errors import ConfigError

            raise ConfigError("open_stream needs a model: model=NAME or worker.models")
        model = model_loader(config.worker, resolve_device(config.worker.device),
                             hooks=hooks)(name)
    return StreamMember(config, model, hooks=hooks, clients=clients)
