"""Avro schemas of inferstream's records and the codec that reads and writes them."""

from inferstream.schemas.codec import SCHEMA_NAMES, Codec, load_schema
from inferstream.schemas.errors import SchemaError

__all__ = ["SCHEMA_NAMES", "Codec", "SchemaError", "load_schema"]
