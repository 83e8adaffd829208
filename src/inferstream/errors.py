"""The root of every error inferstream raises on purpose."""


class InferstreamError(Exception):
    """Base class of inferstream's own errors."""


class ConfigError(InferstreamError):
    """A setting is missing, malformed or contradicts another."""
