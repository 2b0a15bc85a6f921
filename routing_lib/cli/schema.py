"""`routectl schema`: the event JSON Schema."""

from __future__ import annotations

import argparse
import json

from routing_lib.config import Config

HELP = "print the event JSON Schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments of its own."""


def handle(args: argparse.Namespace, config: Config) -> int:
    from schemas import event_json_schema

    print(json.dumps(event_json_schema(), indent=1))
    return 0
