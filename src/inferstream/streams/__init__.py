"""Kafka-facing processes: worker, controller, client SDK, topics."""
