"""`routectl backfill`: the backfill job (routing_lib/jobs/backfill.py)."""

from __future__ import annotations

import argparse

from routing_lib.cli.common import UsageError, warehouse
from routing_lib.config import Config

HELP = "archived .jsonl/.jsonl.gz events -> Delta route tables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", nargs="+", required=True, help="files or folders")
    parser.add_argument("--warehouse", help="Delta warehouse folder")
    parser.add_argument("--as-of", type=int, help="event time (epoch ms): publish State(AS_OF)")
    parser.add_argument("--checkpoint", help="default: WAREHOUSE/_checkpoints/backfill")
    parser.add_argument("--max-files-per-trigger", type=int, help="files per micro-batch")
    parser.add_argument(
        "--allow-future-events",
        action="store_true",
        help="keep lines dated more than [routes] max_future_skew_ms ahead of the wall clock "
        "(synthetic archives); default: dead-letter them",
    )


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.jobs.backfill import run_backfill

    try:
        run_backfill(
            config,
            args.input,
            warehouse(args, config),
            as_of=args.as_of,
            checkpoint=args.checkpoint,
            max_files_per_trigger=args.max_files_per_trigger,
            allow_future_events=args.allow_future_events or None,
        )
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    return 0
