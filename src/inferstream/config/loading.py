"""Where settings come from: `load_config` merges (highest first) CLI flags, the environment
(`INFERSTREAM_<NAME>`, `INFERSTREAM_<SECTION>_<NAME>`), an optional TOML file and the defaults."""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from inferstream.config.controller import ControllerConfig
from inferstream.config.core import SECRET_FILES, Config, parse_kafka_config
from inferstream.config.fields import check_number, setting_types
from inferstream.config.stream import StreamConfig
from inferstream.config.sysinfo import SysinfoConfig
from inferstream.config.worker import WorkerConfig
from inferstream.errors import ConfigError

#: The role sections of Config: TOML table, `INFERSTREAM_<SECTION>_<NAME>`, CLI flags.
SECTIONS: dict[str, type] = {"worker": WorkerConfig, "controller": ControllerConfig,
                             "sysinfo": SysinfoConfig, "stream": StreamConfig}
_ROOT = [f.name for f in dataclasses.fields(Config) if f.name not in SECTIONS]


#: A piece of an environment list that is a parameter (`jitter=0.1`), not a new item.
_PARAMETER = re.compile(r"[A-Za-z_]\w*=[^:=]*")


def _continues_parameters(item: str, piece: str) -> bool:
    """Whether `piece` goes on the parameters of `item` (`sim:ms=1` then `jitter=0.1`): a
    `key=value` after an item with `NAME:key=value` parameters; anything else is a new
    item (`resnet18`, `sim:ms=2`, a pool's `gpu=240`)."""
    return bool(_PARAMETER.fullmatch(piece)) and "=" in item.partition(":")[2]


def _continues_value(item: str, piece: str) -> bool:
    """Whether `piece` goes on the value of the `key=value` `item` (`debug=broker` then
    `topic`): a piece without `=` is no pair of its own."""
    return "=" not in piece


def _env_list(raw: str, continues: Callable[[str, str], bool]) -> list[str]:
    """The items of a comma-separated environment value; a piece for which
    `continues(item, piece)` holds is put back on the item before it, with its comma."""
    items: list[str] = []
    for piece in (p.strip() for p in raw.split(",")):
        if items and piece and continues(items[-1], piece):
            items[-1] = f"{items[-1]},{piece}"
        elif piece:
            items.append(piece)
    return items


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in _ROOT:
        raw = environ.get(f"INFERSTREAM_{name.upper()}")
        if raw is None:
            continue
        if name == "kafka_config":
            values[name] = parse_kafka_config(_env_list(raw, _continues_value))
        else:
            values[name] = raw
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            raw = environ.get(f"INFERSTREAM_{section.upper()}_{f.name.upper()}")
            if raw is None and f.metadata.get("env"):
                raw = environ.get(f.metadata["env"])
            if raw is not None:
                values.setdefault(section, {})[f.name] = raw
    return values


def _from_file(path: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:  # TOML is UTF-8, whatever the locale
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start}): save it "
                          "as UTF-8") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    table = data.get("inferstream", data)
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [inferstream] must be a table")
    values = _file_table(path, table, _ROOT, "")
    for section, cls in SECTIONS.items():
        if section in table:
            if not isinstance(table[section], dict):
                raise ConfigError(f"config file {path}: [{section}] must be a table")
            names = [f.name for f in dataclasses.fields(cls)]
            values[section] = _file_table(path, table[section], names, f"{section}.")
    return values


def _file_table(path: str, table: dict[str, Any], names: list[str], prefix: str
                ) -> dict[str, Any]:
    unknown = set(table) - set(names) - (set(SECTIONS) if not prefix else set())
    if unknown:
        raise ConfigError(f"config file {path}: unknown settings "
                          f"{sorted(prefix + u for u in unknown)}"
                          f"{_file_hint(min(unknown), names, prefix)}")
    values = {k: v for k, v in table.items() if k in names}
    for name, value in values.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            continue  # a list of names (worker.models, sysinfo.pool_strategies)
        if name != "kafka_config" and not isinstance(value, str | int | float | bool):
            raise ConfigError(f"config file {path}: {prefix}{name} must be a string, "
                              "a number or a boolean")
    if "kafka_config" in values:
        pass_through = values["kafka_config"]
        if not isinstance(pass_through, dict):
            raise ConfigError(f"config file {path}: kafka_config must be a table of key = value")
        values["kafka_config"] = tuple((k, str(v)) for k, v in pass_through.items())
    return values


def _file_hint(key: str, names: list[str], prefix: str) -> str:
    """What a config file's unknown `key` may have meant: the table that holds a setting of
    that name (a worker's setting at the top, or in [controller]), else a setting of its own
    table spelt alike."""
    homes = [f"[{section}]" for section, cls in SECTIONS.items()
             if f"{section}." != prefix and key in {f.name for f in dataclasses.fields(cls)}]
    if prefix and key in _ROOT:
        homes.insert(0, "the file's top level")
    if homes:
        return f" ({key} is a setting of {' and '.join(homes)})"
    close = difflib.get_close_matches(key, names, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _typed(name: str, kind: Any, value: Any) -> Any:
    """`value` (a string from the environment, a TOML scalar, a flag) as the field's type."""
    optional = isinstance(kind, types.UnionType) and type(None) in typing.get_args(kind)
    base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    if typing.get_origin(kind) is tuple and typing.get_args(kind) == (str, ...):
        names = _env_list(value, _continues_parameters) if isinstance(value, str) else value
        return tuple(str(n).strip() for n in names if str(n).strip())
    if value is None or typing.get_origin(kind) is tuple or (optional and value == ""):
        return None if value == "" else value
    if base is bool:
        if isinstance(value, bool):
            return value
        if str(value).lower() in _TRUE + _FALSE:
            return str(value).lower() in _TRUE
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if base in (int, float):
        if isinstance(value, bool) or (base is int and isinstance(value, float)):
            # int(3.5) is 3: a TOML float for a whole number is refused, as its text is
            noun = "an integer" if base is int else "a number"
            raise ConfigError(f"{name} must be {noun}, got {value!r}")
        try:
            number = base(value)
        except (TypeError, ValueError) as exc:
            noun = "an integer" if base is int else "a number"
            raise ConfigError(f"{name} must be {noun}, got {value!r}") from exc
        check_number(name, number)
        return number
    return str(value)


def _build(cls: type, values: Mapping[str, Any], prefix: str = "") -> Any:
    """`cls` of `values`; ConfigError naming a key that is no setting of it (a section's
    key in `load_config`'s flags, which nothing else checks)."""
    hints = setting_types(cls)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        close = difflib.get_close_matches(unknown[0], hints, n=1)
        hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
        raise ConfigError(f"{prefix}{unknown[0]} is not an inferstream setting{hint}")
    return cls(**{k: v if k in SECTIONS else _typed(prefix + k, hints[k], v)
                  for k, v in values.items()})


#: The project's INFERSTREAM_* variables that are not settings: the supervisor's word to its
#: child (supervise/environ.py), the worker's test hook, the weights cache, the allocator's
#: re-execution marker, the local Kafka and registry (ops/), compose and the tests.
OTHER_VARIABLES = frozenset(f"INFERSTREAM_{name}" for name in (
    "CONFIG", "SUPERVISOR_PID", "SUPERVISOR_FD", "SUPERVISOR_RESTARTS", "TEST_START_DELAY_S",
    "WEIGHTS_DIR", "PRELOADED_ALLOCATOR", "KAFKA_JVM_OPTS", "KAFKA_TOOL_JVM_OPTS", "KAFKA_DIR",
    "KAFKA_CACHE", "KAFKA_CDS", "TORCH", "CPU_WORKER_THREADS", "COMPOSE_SECRETS",
    "REGEN_GOLDEN"))


def setting_variables() -> list[str]:
    """Every environment variable a setting is read from."""
    names = [f"INFERSTREAM_{name.upper()}" for name in _ROOT]
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            names.append(f"INFERSTREAM_{section.upper()}_{f.name.upper()}")
            names.extend([f.metadata["env"]] if f.metadata.get("env") else [])
    return names


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each INFERSTREAM_* variable of `environ` that no setting reads, naming
    the closest setting's: a misspelled one is ignored otherwise. A warning, not an error:
    other tools may set INFERSTREAM_* variables of their own."""
    known = setting_variables()
    # compared without the prefix all share, which would make any name look close
    by_short = {k.removeprefix("INFERSTREAM_"): k for k in known}
    warnings = []
    for name in sorted(environ):
        if name.startswith("INFERSTREAM_") and name not in known and name not in OTHER_VARIABLES:
            close = difflib.get_close_matches(name.removeprefix("INFERSTREAM_"), by_short, n=1)
            hint = f" (did you mean {by_short[close[0]]}?)" if close else ""
            warnings.append(f"{name} is not an inferstream setting{hint}: ignored")
    return warnings


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build the process's Config: flags > environment > TOML file > defaults.

    `flags` holds CLI values by field name, role settings as a dict under the section's name
    (`{"worker": {"max_batch": 64}}`); None means "not given". A `config_file` key names the
    TOML file, else `INFERSTREAM_CONFIG`.
    """
    flags = dict(flags or {})
    environ = os.environ if environ is None else environ
    layers: list[Mapping[str, Any]] = []
    config_file = flags.pop("config_file", None) or environ.get("INFERSTREAM_CONFIG")
    if config_file:
        layers.append(_from_file(config_file))
    layers.append(_from_env(environ))
    layers.append(flags)
    merged: dict[str, Any] = {section: {} for section in SECTIONS}
    for layer in layers:
        for key, value in layer.items():
            if key in SECTIONS:
                merged[key].update({k: v for k, v in value.items() if v is not None})
            elif key in _ROOT and value is not None:
                merged[key] = value
    for secret, path in SECRET_FILES.items():
        if merged.get(secret) and merged.get(path):
            raise ConfigError(f"set {secret} or {path}, not both")
    sections = {name: _build(cls, merged.pop(name), f"{name}.")
                for name, cls in SECTIONS.items()}
    config: Config = _build(Config, {**merged, **sections})
    return config


def with_section(config: Config, section: str, settings: Mapping[str, Any]) -> Config:
    """`config` with `settings` (by name) applied to its role `section`, checked and typed
    as `load_config`'s flags are: ConfigError naming a key that is no setting of it (and
    the section it belongs to, for another section's setting)."""
    for name in settings:
        owner = next((other for other, cls in SECTIONS.items()
                      if other != section and name in setting_types(cls)), None)
        if owner is not None and name not in setting_types(SECTIONS[section]):
            raise ConfigError(f"{section}.{name} is not an inferstream setting; {owner}.{name} "
                              f"is: load_config(flags={{{owner!r}: {{{name!r}: ...}}}})")
    current = getattr(config, section)
    values = {f.name: getattr(current, f.name) for f in dataclasses.fields(current)}
    built = _build(SECTIONS[section], {**values, **settings}, f"{section}.")
    return dataclasses.replace(config, **{section: built})
