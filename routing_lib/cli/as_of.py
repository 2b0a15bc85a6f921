"""`routectl as-of --at MS`: the route tables at an event time, from the history tables."""

from __future__ import annotations

import argparse
import json

from routing_lib.cli.common import warehouse
from routing_lib.config import Config

HELP = "route tables at an event time, from the history tables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--at", type=int, required=True, help="event time, epoch ms")
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.read.history import as_of_dump

    print(json.dumps(as_of_dump(warehouse(args, config), args.at), indent=1, sort_keys=True))
    return 0
