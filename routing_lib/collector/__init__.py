"""The collector: the broker-facing half of a NameServer, publishing contract events to Kafka."""
