"""Errors of the sysinfo app."""

from inferstream.errors import ConfigError


class UnknownStrategyError(ConfigError):
    """A pool names a strategy that is neither built in nor registered by entry point."""


class StrategyLoadError(ConfigError):
    """A strategy's entry point exists but does not load or is not a Strategy."""
