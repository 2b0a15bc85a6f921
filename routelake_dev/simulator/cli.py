"""`routectl simulate` and `routectl produce`: their arguments and handlers."""

from __future__ import annotations

import argparse

from routelake_dev.simulator.delivery import produce_files, simulate
from routelake_dev.simulator.encoding import DEFAULT_ARCHIVE_MINUTES
from routelake_dev.simulator.generation import (
    DEFAULT_FAULT_INTERVAL_MS,
    DEFAULT_HEARTBEATS_PER_PERIOD,
    DEFAULT_PERIOD_MS,
)


def _kafka_defaults(args: argparse.Namespace) -> tuple[str, str]:
    from routing_lib.config import load_config

    kafka = load_config(getattr(args, "config", None)).kafka
    return args.kafka or kafka.bootstrap_servers, args.topic or kafka.topic


def add_simulate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", help="bootstrap servers (default from conf [kafka])")
    parser.add_argument("--topic", help="Kafka topic (default: config kafka.topic)")
    parser.add_argument("--brokers", type=int, default=8, help="broker groups (default 8)")
    parser.add_argument("--topics", type=int, default=20, help="user topics per broker")
    parser.add_argument(
        "--period-ms",
        type=int,
        default=DEFAULT_PERIOD_MS,
        help="registration period (default 30000)",
    )
    parser.add_argument("--heartbeats-per-period", type=int, default=DEFAULT_HEARTBEATS_PER_PERIOD)
    parser.add_argument(
        "--fault-interval-ms",
        type=int,
        default=DEFAULT_FAULT_INTERVAL_MS,
        help="mean time between faults per group; 0 = no faults",
    )
    parser.add_argument("--seed", default="1")
    parser.add_argument(
        "--duration",
        type=float,
        dest="duration_s",
        help="seconds of event time (default: run until interrupted)",
    )
    parser.add_argument(
        "--start-ms",
        type=int,
        help="first eventTime (default: now, or now - duration if not rate limited)",
    )
    parser.add_argument(
        "--disorder-ms", type=int, default=0, help="shuffle arrival order within this bound"
    )
    parser.add_argument(
        "--no-rate-limit",
        dest="rate_limit",
        action="store_false",
        help="send as fast as possible instead of at the wall clock",
    )
    parser.add_argument(
        "--archive",
        metavar="DIR",
        help="write .jsonl.gz archives instead of producing (with --produce: as well)",
    )
    parser.add_argument(
        "--archive-minutes",
        type=int,
        default=DEFAULT_ARCHIVE_MINUTES,
        help="event-time minutes per archive file (default 10)",
    )
    parser.add_argument(
        "--produce", action="store_true", help="with --archive: also produce to Kafka"
    )


def run_simulate(args: argparse.Namespace) -> int:
    bootstrap, topic = _kafka_defaults(args)
    produce = args.archive is None or args.produce
    seed: int | str = int(args.seed) if str(args.seed).lstrip("-").isdigit() else args.seed
    stats = simulate(
        bootstrap if produce else None,
        topic,
        args.brokers,
        args.topics,
        args.period_ms,
        seed,
        args.rate_limit and produce,
        args.duration_s,
        args.archive,
        start_ms=args.start_ms,
        disorder_ms=args.disorder_ms,
        heartbeats_per_period=args.heartbeats_per_period,
        fault_interval_ms=args.fault_interval_ms,
        archive_minutes=args.archive_minutes,
    )
    where = [f"{topic} on {bootstrap}"] if produce else []
    where += [f"{len(stats.files)} files in {args.archive}"] if args.archive else []
    print(
        f"simulate: {stats.events} events ({stats.bytes / 1e6:.1f} MB, eventTime "
        f"{stats.first_event_time}..{stats.last_event_time}) -> {' and '.join(where)} "
        f"in {stats.seconds:.1f} s"
    )
    return 0


def add_produce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help=".jsonl or .jsonl.gz files, sent in order")
    parser.add_argument("--kafka", help="bootstrap servers (default from conf [kafka])")
    parser.add_argument("--topic", help="Kafka topic (default: config kafka.topic)")


def run_produce(args: argparse.Namespace) -> int:
    bootstrap, topic = _kafka_defaults(args)
    sent = produce_files(bootstrap, topic, args.files)
    print(f"produce: {sent} messages -> {topic} on {bootstrap}")
    return 0
