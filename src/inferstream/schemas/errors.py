"""Errors of the schemas package: records that cannot be encoded or decoded."""

from inferstream.errors import InferstreamError


class SchemaError(InferstreamError):
    """A record does not fit its schema, or bytes are not a record inferstream can read.

    The message names the cause ("truncated", "bad magic", "unknown fingerprint 0x...",
    "unknown schema id N", "not valid Avro for schema X: ..."), fit for a dead letter's reason.
    """


class SchemaRegistryError(SchemaError):
    """The Schema Registry could not be reached or answered with an error status.

    `url` is the request's URL; `status` the HTTP status, or None when no answer came.
    """

    def __init__(self, message: str, *, url: str, status: int | None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class SchemaRegistryTLSError(SchemaRegistryError):
    """The TLS handshake with an https registry failed: its certificate did not verify, or it
    refused this client's. The message names what to change: a setting, or the URL's host."""
