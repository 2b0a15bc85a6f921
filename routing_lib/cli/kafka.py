"""`routectl kafka start|stop|status|topic`: the local Kafka broker (routelake_dev)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "local Kafka broker (KRaft): start | stop | status | topic"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from routelake_dev.kafka_local import add_kafka_args

    add_kafka_args(parser)


def handle(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.kafka_local import run_kafka

    return run_kafka(args, config)
