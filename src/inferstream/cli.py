"""The `inferstream` command: one subcommand per role (see DESIGN.md "Processes").

Every setting of `Config` is also a flag, made here from the field's metadata: the
connection settings on every subcommand, a role's section (`WorkerConfig`, ...) on the role's
subcommand. A flag that is not given is None, so the environment, the TOML file and the
defaults (written once, on the field) show through.
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import sys
import typing
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, NoReturn

from inferstream import LOG_FORMAT, __version__
from inferstream.config import (
    SECTIONS,
    Config,
    load_config,
    parse_kafka_config,
    setting_types,
    unknown_variables,
)
from inferstream.errors import ConfigError, InferstreamError

if TYPE_CHECKING:
    from inferstream.commands import Command

log = logging.getLogger("inferstream")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_SECTION_SEP = "__"


def _flag_type(kind: Any) -> Any:
    base = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
    return base if base in (int, float) else str


def add_setting_flags(parser: argparse.ArgumentParser | Any, cls: type,
                      section: str | None = None) -> None:
    """One flag per field of the settings class `cls` (a section's flags carry its name)."""
    hints = setting_types(cls)
    for f in dataclasses.fields(cls):
        if f.name in SECTIONS:
            continue
        meta = f.metadata
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        dest = f"{section}{_SECTION_SEP}{f.name}" if section else f.name
        shown = "" if "(empty: " in meta.get("help", "") else f" (default: {_shown(f.default)})"
        kwargs: dict[str, Any] = {"dest": dest, "default": None,
                                  "help": f"{meta.get('help', '')}{shown}"}
        if hints[f.name] is bool:
            kwargs.update(action="store_const", const=True)
        elif typing.get_origin(hints[f.name]) is tuple:  # kafka_config, worker.models
            kwargs.update(action="append", metavar=meta.get("metavar"))
        else:
            choices = meta.get("choices")
            kwargs.update(type=_flag_type(hints[f.name]), choices=choices,
                          metavar=None if choices else meta.get("metavar") or f.name.upper())
        parser.add_argument(flag, **kwargs)


def _shown(default: Any) -> str:
    """A default as --help shows it (as docs/configuration.md writes it): a list's items
    comma-separated, not a Python tuple's repr."""
    if default is None or default == ():
        return "none"
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, tuple):
        return ", ".join(map(str, default))
    return str(default) if default != "" else "empty"


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection (also INFERSTREAM_<NAME> or a TOML file)")
    group.add_argument("--config", dest="config_file", metavar="FILE",
                       help="TOML settings file (or INFERSTREAM_CONFIG; default: none)")
    add_setting_flags(group, Config)
    group.add_argument("--log-level", default="INFO",
                       help=f"{', '.join(LOG_LEVELS)} (default: INFO)")


class OneLineParser(argparse.ArgumentParser):
    """A parser whose mistakes are one line and exit 2, as every other mistake is
    (docs/cli.md): argparse prints the whole usage first, 60 lines for a role's command;
    `-h` still prints it. Its subcommands' parsers are of this class too (add_subparsers
    makes them of the parent's class). A flag is taken only as spelt in full: argparse's
    prefixes read `controller --model x` as `--model-wait-s x` ("invalid float value"), and a
    prefix that names one flag today names two once another is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.fail(message, self.prog)

    def fail(self, message: str, prog: str) -> NoReturn:
        """Exit 2 with `message` on one line, pointing at `prog`'s help."""
        self.exit(2, f"inferstream: error: {message} ({prog} --help lists the flags)\n")


def parse_args(parser: OneLineParser, argv: Sequence[str]) -> argparse.Namespace:
    """`argv` parsed by the command's `parser`; an unknown flag points at its subcommand's
    help (argparse's own error names the top command, whose help lists no role's flags)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command == "config" and args.role in _ROLE_COMMANDS:
        unknown = _take_role_flags(parser, args, unknown)
    if unknown:
        parser.fail(f"unrecognized arguments: {' '.join(unknown)}",
                    f"{parser.prog} {args.command}")
    return args


#: The roles of `config show|check --role ROLE` whose command has flags of its own.
_ROLE_COMMANDS = ("worker", "controller", "sysinfo", "stream")


def _take_role_flags(parser: OneLineParser, args: argparse.Namespace,
                     unknown: list[str]) -> list[str]:
    """`config check --role worker --model M`: the role's own flags, parsed by its command's
    parser into `args`, so that the check runs with the settings the role would start with
    (the worker's check says `needs a model: --model NAME`); returns what is still unknown."""
    role_args, rest = parser.parse_known_args([args.role, *unknown])
    for dest, value in vars(role_args).items():
        if _SECTION_SEP in dest and value is not None:
            setattr(args, dest, value)
    return rest


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="inferstream", description="Deep-learning inference scheduled through Kafka.")
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    from inferstream.commands import COMMANDS

    for name, command in COMMANDS.items():
        child = sub.add_parser(name, help=command.help, description=command.help)
        command.add_args(child)
        for section in command.sections:
            title = f"{section} settings (also INFERSTREAM_{section.upper()}_"
            group = child.add_argument_group(title + "<NAME> or the TOML file's "
                                             f"[{section}] table)")
            add_setting_flags(group, SECTIONS[section], section)
        _connection_flags(child)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    flags: dict[str, Any] = {section: {} for section in SECTIONS}
    for dest, value in vars(args).items():
        section, sep, name = dest.partition(_SECTION_SEP)
        if sep and section in SECTIONS:
            flags[section][name] = value
        elif dest not in SECTIONS:
            flags[dest] = value
    if args.kafka_config:
        flags["kafka_config"] = parse_kafka_config(args.kafka_config)
    return load_config(flags)


def _log_level(name: str) -> int:
    level = logging.getLevelNamesMapping().get(str(name).upper())
    if level is None:
        raise ConfigError(f"--log-level {name!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def _setup_logging(level: int, long_running: bool) -> None:
    from inferstream.repeats import hold_back_repeats

    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    hold_back_repeats()  # a broker away: the clients' complaint once in a while, counted
    # librdkafka warns about transient states (a coordinator still loading on a fresh broker)
    # that the client retries by itself; show only its errors unless debugging. A short
    # command shows none: what stops it is its own line (the start-up check reads
    # librdkafka's words for it), and one broker of three away printed "FAIL ... Connection
    # refused" above the output of a command that succeeded.
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("inferstream.librdkafka").setLevel(
            logging.ERROR if long_running else logging.CRITICAL)


def _stop_signals(command: Command, config: Config) -> AbstractContextManager[object]:
    """`StopSignals` for a long-running command."""
    from inferstream.signals import StopSignals

    return StopSignals(config.stop_grace_s) if command.long_running else nullcontext()


def _run(command: Command, args: argparse.Namespace, config: Config,
         argv: Sequence[str]) -> int:
    """Start-up checks, then the command (a long-running one under `StopSignals`); a
    supervised one as the child of a supervisor (`supervise`) unless `restart = off`.

    The checks run once, before the supervisor starts its first child: a restarted child
    connects as a running process does, waiting for a cluster that is away.
    """
    from inferstream.kafka.preflight import preflight
    from inferstream.supervise import child

    if command.supervised and child.supervised():
        with _stop_signals(command, config):
            if not child.follow_supervisor():
                raise InferstreamError("its supervisor is gone: not starting")
            return command.run(args, config)
    with _stop_signals(command, config):
        if command.needs is not None:
            preflight(config, command.needs(config))
        if not (command.supervised and config.restart == "on"):
            return command.run(args, config)
    from inferstream.supervise import supervise

    supervise(args.command, [sys.executable, "-m", "inferstream", *argv], config)


def main(argv: Sequence[str] | None = None) -> int:
    from inferstream.commands import COMMANDS
    from inferstream.garbage import spare_the_teardown, tune_collector

    tune_collector()
    if argv is None:  # the program's own run, not a call from Python: it ends when this does
        atexit.register(spare_the_teardown)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(build_parser(), argv)
    try:
        _setup_logging(_log_level(args.log_level), COMMANDS[args.command].long_running)
        _warn_unknown_variables()
        return _run(COMMANDS[args.command], args, config_from_args(args), argv)
    except InferstreamError as exc:
        if not _said_by_supervisor(exc):
            print(f"inferstream: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `inferstream results JOB | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 0


def _warn_unknown_variables() -> None:
    """Warn of each INFERSTREAM_* variable no setting reads; once, by the supervisor where
    there is one (its child reads the same environment)."""
    from inferstream.supervise import child

    if not child.supervised():
        for warning in unknown_variables(os.environ):
            log.warning("%s", warning)


def _said_by_supervisor(exc: InferstreamError) -> bool:
    """Whether this process's supervisor was handed `exc`, the cluster's refusal, to say as
    its own last line (it then starts no other process: no restart brings an ACL)."""
    from inferstream.kafka.errors import AuthorizationError
    from inferstream.supervise import child

    return (isinstance(exc, AuthorizationError) and child.supervised()
            and child.note_refused(str(exc)))
