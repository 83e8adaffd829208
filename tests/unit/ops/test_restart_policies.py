"""The restart policies of the shipped deployment files: every long-running role runs under
its supervisor (restart = on) with the platform's own restart as the net below it, is given
the time to drain when stopped, and is not restarted in a loop after a bad setting."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferstream.cli import build_parser, config_from_args
from inferstream.commands import COMMANDS
from inferstream.config import Config

REPO = Path(__file__).resolve().parents[3]
UNITS = sorted((REPO / "ops" / "systemd").glob("*.service"))
SUPERVISED = {name for name, command in COMMANDS.items() if command.supervised}
#: What a drain may take before the supervisor kills the role, and a little more.
DRAIN_S = Config().stop_grace_s + 10


def unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False)  # EnvironmentFile may repeat
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path)
    return parser


def seconds(text: str) -> float:
    """A Compose or systemd duration: `45s`, `1m30s` or plain seconds."""
    total, number = 0.0, ""
    for char in text:
        if char.isdigit() or char == ".":
            number += char
        else:
            total += float(number) * {"s": 1, "m": 60}[char]
            number = ""
    return total + float(number or 0)


def test_a_unit_runs_each_supervised_role() -> None:
    roles = {shlex.split(unit(path)["Service"]["ExecStart"])[1] for path in UNITS}
    assert roles == SUPERVISED


@pytest.mark.parametrize("path", UNITS, ids=lambda p: p.name)
def test_a_unit_drains_its_role_and_restarts_only_what_may_recover(path: Path) -> None:
    service = unit(path)["Service"]
    argv = [arg.replace("%i", "googlenet") for arg in shlex.split(service["ExecStart"])[1:]]
    config = config_from_args(build_parser().parse_args(argv))
    assert config.restart == "on" and "INFERSTREAM_RESTART=on" in service["Environment"]
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"] == "2"  # a bad setting: its one line, no loop
    assert service["KillMode"] == "mixed"  # one SIGTERM, to the supervisor: a drain
    assert seconds(service["TimeoutStopSec"]) > DRAIN_S


def compose_roles() -> dict[str, dict[str, Any]]:
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    return {name: service for name, service in services.items()
            if service.get("command", [""])[0] in SUPERVISED}


def test_compose_restarts_each_role_under_its_supervisor_and_lets_it_drain() -> None:
    services = compose_roles()
    assert {service["command"][0] for service in services.values()} == SUPERVISED - {"stream"}
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert service["environment"]["INFERSTREAM_RESTART"] == "on", name
        assert seconds(service["stop_grace_period"]) > DRAIN_S, name
