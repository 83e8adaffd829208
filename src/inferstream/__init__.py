"""inferstream: deep-learning inference scheduled across machines through Apache Kafka."""

__version__ = "0.1.0"
#: Every process's log lines (the supervisor's among its child's).
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
