"""Errors of the client's calls to the sysinfo app's HTTP API."""

from inferstream.errors import InferstreamError


class SysInfoError(InferstreamError):
    """A call to the sysinfo app's HTTP API failed; `url` is the URL called."""

    def __init__(self, url: str, message: str) -> None:
        super().__init__(message)
        self.url = url



class SysInfoUnreachableError(SysInfoError):
    """The sysinfo app did not answer at `url` (refused, timed out, connection dropped)."""



class SysInfoNotFoundError(SysInfoError):
    """The sysinfo app knows no such worker or pool; `reason` is the server's message."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, f"not found: {reason} ({url})")
        self.reason = reason



class SysInfoRefusedError(SysInfoError):
    """The sysinfo app refused this client's token, or its certificate is not trusted here."""



class SysInfoResponseError(SysInfoError):
    """The sysinfo app answered with an error status or a body outside its JSON contract."""
