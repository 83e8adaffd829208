"""Errors of a stream member's input records."""

from inferstream.errors import InferstreamError


class RecordError(InferstreamError):
    """A stream's input record cannot be read as its --input-format says (its image is not
    the question yet): the record gets an error outcome or a dead letter with this reason."""
