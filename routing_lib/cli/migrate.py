"""`routectl migrate`: upgrade a warehouse of the per-topic layout (before issue 36) to the group
layout in place (routing_lib/migrate.py; docs/operations.md, "Upgrading a warehouse to the
group layout (issue 36)")."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from routing_lib.config import Config

if TYPE_CHECKING:
    from routing_lib.core.overlay import GroupTopics

HELP = "upgrade a warehouse of the per-topic layout to the group layout (stop the job first)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse", help="default: [paths] warehouse of the config")
    parser.add_argument(
        "--checkpoint",
        help="the job's checkpoint, whose group states (bases and overlays) the migrated "
        "tables must hold (default: [paths] checkpoint of the config)",
    )
    parser.add_argument(
        "--without-state",
        action="store_true",
        help="no checkpoint will be used with this warehouse again: bases from "
        "topic_queue_table under trivial overlays (needed when --checkpoint does not exist)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="check and count everything, write nothing"
    )
    parser.add_argument(
        "--quiet-s",
        type=float,
        help="refuse if the job published a batch this recently (default: 120)",
    )


def handle(args: argparse.Namespace, config: Config) -> int:
    from routing_lib import storage
    from routing_lib.layout import old_layout_reason
    from routing_lib.migrate import DEFAULT_QUIET_S, check_stopped, migrate
    from routing_lib.migrate_facts import NotReproducible

    warehouse = storage.resolve(args.warehouse or config.paths.warehouse)
    checkpoint = storage.resolve(args.checkpoint or config.paths.checkpoint)
    if not storage.is_dir(warehouse):
        print(f"routectl migrate: warehouse {warehouse} does not exist", file=sys.stderr)
        return 2
    if old_layout_reason(warehouse) is None:
        print(f"{warehouse}: already of the group layout, nothing to do")
        return 0
    if not args.without_state and not storage.is_dir(checkpoint):
        # Bases from topic_queue_table would be wrong for the job's absent and wiped groups
        # if the job then ran on with a checkpoint migrate did not read.
        print(
            f"routectl migrate: checkpoint {checkpoint} does not exist. Pass the checkpoint "
            "the job writes this warehouse with (--checkpoint; a backfill's is "
            f"{storage.join(warehouse, '_checkpoints', 'backfill')}), or --without-state "
            "if no checkpoint will be used with this warehouse again",
            file=sys.stderr,
        )
        return 2
    quiet_s = DEFAULT_QUIET_S if args.quiet_s is None else args.quiet_s
    check_stopped(warehouse, None if args.without_state else checkpoint, quiet_s)
    states = None if args.without_state else _states(checkpoint, config)
    try:
        report = migrate(warehouse, states, dry_run=args.dry_run)
    except NotReproducible as exc:
        print(
            f"routectl migrate: the stored topic_route_history of {warehouse} cannot be "
            f"written as the group layout's facts exactly ({exc.count} problem(s)); nothing "
            "was written. First ones:",
            file=sys.stderr,
        )
        for problem in exc.problems[:10]:
            print(f"  {problem}", file=sys.stderr)
        print(
            "Re-backfill into a new warehouse instead: `routectl backfill --input ARCHIVE "
            "--warehouse NEW_WAREHOUSE` over the archived input (docs/operations.md)",
            file=sys.stderr,
        )
        return 1
    for line in report.lines():
        print(line)
    return 0


def _states(checkpoint: str, config: Config) -> dict[str, GroupTopics] | None:
    """The checkpoint's group states (Spark reads them), or None when it has no state yet."""
    from routing_lib.migrate_state import checkpoint_states, has_state

    if not has_state(checkpoint):
        print(f"checkpoint {checkpoint} has no state: bases from topic_queue_table (trivial)")
        return None
    from routing_lib.spark.session import build_spark

    spark = build_spark(config, "routectl-migrate")
    try:
        return checkpoint_states(spark, checkpoint)
    finally:
        spark.stop()
