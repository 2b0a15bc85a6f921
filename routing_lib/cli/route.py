"""`routectl route TOPIC`: TopicRouteData of a topic, as the NameServer answers."""

from __future__ import annotations

import argparse
import json
import sys

from routing_lib.cli.common import route_index
from routing_lib.config import Config

HELP = "TopicRouteData of a topic, as the NameServer answers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topic")
    parser.add_argument("--warehouse")


def handle(args: argparse.Namespace, config: Config) -> int:
    route = route_index(args, config).route(args.topic)
    if route is None:
        print(
            f"routectl route: TOPIC_NOT_EXIST (17): No topic route info in name server for "
            f"the topic: {args.topic}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(route, indent=1))
    return 0
