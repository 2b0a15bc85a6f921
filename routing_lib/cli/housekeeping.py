"""`routectl housekeeping`: OPTIMIZE and VACUUM the warehouse tables (docs/housekeeping.md)."""

from __future__ import annotations

import argparse

from routing_lib.config import Config

HELP = "OPTIMIZE and VACUUM every warehouse table (docs/housekeeping.md)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse", help="default: [paths] warehouse of the config")
    parser.add_argument(
        "--vacuum-hours", type=int, help="VACUUM retention in hours (default: a week, as Delta's)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="compact nothing; list the files VACUUM would delete"
    )
    parser.add_argument(
        "--disable-retention-check",
        action="store_true",
        help="allow a --vacuum-hours below the default (like "
        "spark.databricks.delta.retentionDurationCheck.enabled=false)",
    )
    parser.add_argument(
        "--lite",
        action="store_true",
        help="VACUUM only files the log marks as removed (keeps old _change_data/ and orphans)",
    )
    parser.add_argument(
        "--since", metavar="YYYY-MM-DD", help="history tables: compact only event_date >= this day"
    )
    parser.add_argument(
        "--before", metavar="YYYY-MM-DD", help="history tables: compact only event_date < this day"
    )
    parser.add_argument(
        "--content",
        action="store_true",
        help="instead: delete the checkpoint's content files no state version, batch or worker "
        "can refer to (needs Spark; safe while the job runs)",
    )
    parser.add_argument("--checkpoint", help="--content: default [paths] checkpoint of the config")
    parser.add_argument(
        "--content-grace-s",
        type=float,
        help="--content: keep files written this recently (default [spark] content_gc_grace_s)",
    )
    parser.add_argument(
        "--table",
        action="append",
        type=_warehouse_table,
        help="only this table (repeatable; default: all)",
    )


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib.housekeeping import run

    return run(args, config)


def _warehouse_table(name: str) -> str:
    """--table, checked when given (importing the table list costs delta-rs at every start)."""
    from routing_lib.housekeeping import WAREHOUSE_TABLES

    if name not in WAREHOUSE_TABLES:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(WAREHOUSE_TABLES)}")
    return name
