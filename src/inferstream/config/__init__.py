"""The one configuration of an inferstream process.

Settings are read in one place, `load_config` (`loading.py`), from (highest first) CLI flags,
the environment (`INFERSTREAM_<NAME>`), an optional TOML file (`--config FILE` or
`INFERSTREAM_CONFIG`) and the defaults, each written once where its field is declared
(`core.py` for the connection, one module per role's section: `worker.py`, `controller.py`,
`stream.py`, `sysinfo.py`). The result is frozen and validated; nothing
is read at import time.
"""

from inferstream.config.controller import ControllerConfig
from inferstream.config.core import MASK, Config, parse_kafka_config
from inferstream.config.fields import seconds_arg, setting, setting_types
from inferstream.config.loading import SECTIONS, load_config, unknown_variables, with_section
from inferstream.config.stream import StreamConfig
from inferstream.config.sysinfo import SysinfoConfig
from inferstream.config.worker import DEFAULT_COLLECTORS, GUARANTEES, WorkerConfig

__all__ = [
    "DEFAULT_COLLECTORS",
    "GUARANTEES",
    "MASK",
    "SECTIONS",
    "Config",
    "ControllerConfig",
    "StreamConfig",
    "SysinfoConfig",
    "WorkerConfig",
    "load_config",
    "parse_kafka_config",
    "seconds_arg",
    "setting",
    "setting_types",
    "unknown_variables",
    "with_section",
]
