"""The supervisor's settings: on or off, and delays that make sense, refused in one line."""

from __future__ import annotations

import pytest

from inferstream.config import Config, load_config
from inferstream.errors import ConfigError


def test_the_long_running_roles_are_supervised_unless_told_otherwise() -> None:
    assert Config().restart == "on"
    assert load_config({}, {"INFERSTREAM_RESTART": "off"}).restart == "off"


@pytest.mark.parametrize(("settings", "error"), [
    ({"restart": "sometimes"}, "restart must be on or off, got 'sometimes'"),
    ({"restart_delay_s": -1.0}, "restart_delay_s must be >= 0"),
    ({"restart_delay_s": 5.0, "restart_max_delay_s": 2.0}, "restart_max_delay_s must be >= 5"),
])
def test_a_bad_restart_setting_is_one_line(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        Config(**settings)  # type: ignore[arg-type]
