"""inferstream: deep-learning inference scheduled across machines through Apache Kafka."""

__version__ = "0.1.0"
