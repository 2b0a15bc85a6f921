"""Developer tooling, not part of the product: the broker-fleet simulator, a local Kafka
broker, the demo, and helpers shared by tests and benchmarks."""
