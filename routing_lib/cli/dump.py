"""`routectl dump`: the route tables as canonical JSON (delta-rs, no JVM)."""

from __future__ import annotations

import argparse

from routing_lib.cli.common import warehouse
from routing_lib.config import Config

HELP = "canonical JSON dump of the route tables (no JVM)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.core.dump import to_json
    from routing_lib.read.warehouse import load_snapshot

    print(to_json(load_snapshot(warehouse(args, config)).dump()))
    return 0
