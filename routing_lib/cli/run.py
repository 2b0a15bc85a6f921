"""`routectl run`: the streaming job route_state (routing_lib/jobs/route_state.py)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "the streaming job (route_state): Kafka -> Delta route tables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", help="bootstrap servers (default from conf)")
    parser.add_argument("--topic", help="Kafka topic of broker events")
    parser.add_argument("--warehouse")
    parser.add_argument("--checkpoint")
    parser.add_argument("--starting-offsets", help="earliest | latest | Spark JSON offsets")
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--trigger-interval", help='e.g. "2 seconds"')
    parser.add_argument(
        "--available-now", action="store_true", help="process what the topic holds now, then exit"
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.jobs.route_state import run_route_state

    config = config.with_overrides(
        "kafka",
        bootstrap_servers=args.kafka,
        topic=args.topic,
        starting_offsets=args.starting_offsets,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        trigger_interval=args.trigger_interval,
    )
    config = config.with_overrides("paths", warehouse=args.warehouse, checkpoint=args.checkpoint)
    run_route_state(config, available_now=args.available_now, metrics_port=args.metrics_port)
    return 0
