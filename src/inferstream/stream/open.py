"""`open_stream`: a stream member from Python, its model loaded by name."""


from __future__ import annotations

from typing import Any

from inferstream.config import Config, with_section
from inferstream.kafka.clients import REAL_CLIENTS, KafkaClients
from inferstream.models import LoadedModel
from inferstream.schemas import Codec
from inferstream.serving.hooks import WorkerHooks
from inferstream.serving.loop import Worker
from inferstream.stream.source import new_member


def open_stream(config: Config, model: str | LoadedModel | None = None, *,
                hooks: WorkerHooks | None = None, codec: Codec | None = None,
                clients: KafkaClients = REAL_CLIENTS, **settings: Any) -> Worker:
    """A stream member of `config` with `settings` (fields of `StreamConfig`: input_topic,
    output_topic, input_format, ...) applied, as `load_config` takes them (ConfigError for
    a name that is none); `model` by name (loaded on the worker's `device`) or loaded, else
    the config's `worker.models[0]`."""
    config = with_section(config, "stream", settings)
    config.stream.check_complete()
    if not isinstance(model, LoadedModel):
        from inferstream.models.registry import resolve_device
        from inferstream.serving.loader import model_loader

        name = model or (config.worker.models[0] if config.worker.models else None)
        if name is None:
            from inferstream.errors import ConfigError

            raise ConfigError("open_stream needs a model: model=NAME or worker.models")
        model = model_loader(config.worker, resolve_device(config.worker.device),
                             hooks=hooks)(name)
    return new_member(config, model, hooks=hooks, codec=codec, clients=clients)
