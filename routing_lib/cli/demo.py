"""`routectl demo`: local Kafka + a simulated fleet + the streaming job + lookup, live
(routelake_dev/demo.py)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "local Kafka + simulated fleet + job + lookup, live"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=6, help="broker groups to simulate")
    parser.add_argument("--topics", type=int, default=10, help="topics per broker")
    parser.add_argument("--duration", type=float, help="seconds (default: until Ctrl-C)")
    parser.add_argument("--work-dir", help="logs and tables (default .work/demo; emptied first)")


def handle(args: argparse.Namespace, config: Config) -> int:
    from routelake_dev.demo import run_demo

    return run_demo(config, args.brokers, args.topics, args.duration, args.work_dir)
