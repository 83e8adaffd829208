"""How a settings field is declared and checked; shared by `config` and its section modules."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from inferstream.errors import ConfigError


def setting(default: Any, help: str, *, flag: str | None = None,
            choices: tuple[str, ...] | None = None, secret: bool = False,
            metavar: str | None = None) -> Any:
    """A field of a settings class: its default (written only here), CLI help and flag.

    The flag defaults to `--<name with dashes>`; `secret` keeps the value out of `repr`.
    """
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar}
    return field(default=default, repr=not secret, metadata=meta)


def at_least(name: str, value: float | None, low: float) -> None:
    """ConfigError unless `value` is None or at least `low`."""
    if value is not None and value < low:
        raise ConfigError(f"{name} must be >= {low:g}, got {value:g}")
