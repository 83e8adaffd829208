"""What every Kafka-facing role shares: client settings and factories, topics, the partition
reader, dead letters and the bounded-call workaround."""
