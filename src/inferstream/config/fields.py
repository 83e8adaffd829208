"""How a settings field is declared and checked; shared by `config` and its section modules."""

from __future__ import annotations

import argparse
import functools
import math
import typing
from dataclasses import field
from pathlib import Path
from typing import Any

from inferstream.errors import ConfigError


def setting(default: Any, help: str, *, flag: str | None = None,
            choices: tuple[str, ...] | None = None, secret: bool = False,
            metavar: str | None = None, env: str | None = None) -> Any:
    """A field of a settings class: its default (written only here), CLI help and flag.

    The flag defaults to `--<name with dashes>`; `secret` keeps the value out of `repr`;
    `env` is a second environment variable read where `INFERSTREAM_<SECTION>_<NAME>` is unset.
    """
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar, "env": env}
    return field(default=default, repr=not secret, metadata=meta)


@functools.cache
def setting_types(cls: type) -> dict[str, Any]:
    """The field types of the settings class `cls`, evaluated once per class (do not change
    the dict): `typing.get_type_hints` evaluates every string annotation again on each call,
    40 % of building the command's parser, which every `inferstream` call does."""
    return typing.get_type_hints(cls)


def at_least(name: str, value: float | None, low: float) -> None:
    """ConfigError unless `value` is None or at least `low`."""
    if value is not None and value < low:
        raise ConfigError(f"{name} must be >= {low:g}, got {value:g}")


def check_readable(name: str, path: str | None) -> None:
    """ConfigError naming setting `name` and `path` when the file cannot be read (None: not
    set), where a TLS library says only that some file could not be loaded (librdkafka's
    "system lib", Python's "No such file or directory" without the name)."""
    if path is None:
        return
    try:
        Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{name} {path}: cannot read it ({exc.strerror})") from exc


#: The longest duration a setting or flag may hold, in seconds: librdkafka takes its timeouts
#: as int milliseconds below 2**31 (about 24.8 days), and the roles hand it theirs.
MAX_DURATION_S = 2_147_483


def check_number(name: str, value: float) -> None:
    """ConfigError unless `value` is finite and, for a duration (a name ending in `_s` or
    `_ms`), at most MAX_DURATION_S: nan passes every range check, and inf or a value past
    librdkafka's int milliseconds fails later, far from the setting."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    unit, scale = ("ms", 1000) if name.endswith("_ms") else ("s", 1)
    if name.endswith(("_s", "_ms")) and value > MAX_DURATION_S * scale:
        raise ConfigError(f"{name} must be at most {MAX_DURATION_S * scale} {unit} "
                          f"(about 24 days, librdkafka's longest timeout), got {value!r}")


def seconds_arg(text: str) -> float:
    """argparse type of a duration flag that is not a setting (`submit --timeout`): above 0
    (`submit --timeout -1` submitted the job, then gave up on it at once), at most
    MAX_DURATION_S."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_DURATION_S:  # NaN compares false
        raise argparse.ArgumentTypeError(
            f"expects a number of seconds above 0 and up to {MAX_DURATION_S}, got {text!r}")
    return value


METRICS_PORT_HELP = "serve /metrics on this port"
METRICS_ADDR_HELP = ("address /metrics listens on (0.0.0.0: every interface, for a Prometheus "
                     "on another host)")


def check_port(name: str, port: int | None) -> None:
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{name} {port} is not a TCP port")


def metrics_port() -> Any:
    """The `metrics_port` setting of a role that serves /metrics (none by default)."""
    return setting(None, METRICS_PORT_HELP)


def metrics_addr() -> Any:
    """The `metrics_addr` setting of a role that serves /metrics (loopback by default)."""
    return setting("127.0.0.1", METRICS_ADDR_HELP)


def idle_exit(until: str) -> Any:
    """The `idle_exit_s` setting of a long-running role: its bounded mode, off by default."""
    return setting(None, f"exit after this long {until} (bounded mode)", flag="--idle-exit",
                   metavar="SECONDS")
