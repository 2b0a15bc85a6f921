"""`routectl simulate`: a simulated broker fleet into Kafka or archives (routelake_dev)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "simulate a broker fleet into Kafka or archives"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from routelake_dev.simulator.cli import add_simulate_args

    add_simulate_args(parser)


def handle(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.simulator.cli import run_simulate

    return run_simulate(args)
