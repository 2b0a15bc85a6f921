"""routelake: RocketMQ NameServer route tables as an event-time streaming job over Delta Lake."""

__version__ = "0.1.0"
