"""`routectl produce`: archive files' lines to Kafka, in order (routelake_dev)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "send archive files' lines to Kafka, in order"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from routelake_dev.simulator.cli import add_produce_args

    add_produce_args(parser)


def handle(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.simulator.cli import run_produce

    return run_produce(args)
