"""Which layout a warehouse holds: the per-topic one written before issue 36, or the group
layout (topic_base + topic_overlay, the change tables, topic_queue_table partitioned by
broker_name, topic_route_history derived).

The job and the readers call `require_group_layout` where they open the tables: on a
warehouse of the per-topic layout they stop with a message naming `routectl migrate`
(routing_lib/migrate.py) instead of mixing the layouts or reading tables that are not there.
Only the `_delta_log` folders are looked at (and one table's metadata when needed): cheap.
"""

from __future__ import annotations

from pathlib import Path

from routing_lib import storage
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_QUEUE, TOPIC_ROUTE_HISTORY, spec


class OldLayoutError(RuntimeError):
    """The warehouse holds the per-topic layout: `routectl migrate` upgrades it."""


def _is_table(warehouse: str, table: str) -> bool:
    return storage.is_dir(storage.join(warehouse, table, "_delta_log"))


def old_layout_reason(warehouse: str | Path) -> str | None:
    """Why the warehouse is of the per-topic layout, or None (the group layout, or no tables
    yet: the job creates the group layout's tables).

    The migration writes topic_base last, so a warehouse with topic_base is migrated (or was
    created by the group layout's job); one with topic_route_history or topic_queue_table
    stored and no topic_base is not (also after a migration that stopped half-way)."""
    root = str(warehouse)
    if _is_table(root, TOPIC_BASE):
        return None
    if _is_table(root, TOPIC_ROUTE_HISTORY):
        return "it stores topic_route_history per topic and has no topic_base"
    if _is_table(root, TOPIC_QUEUE) and not _partitioned_as_specified(root, TOPIC_QUEUE):
        return "its topic_queue_table is not partitioned by broker_name and it has no topic_base"
    return None


def _partitioned_as_specified(warehouse: str, table: str) -> bool:
    columns = storage.open_delta(storage.join(warehouse, table)).metadata().partition_columns
    return tuple(columns) == spec(table).partition_by


def migrate_command(warehouse: str | Path) -> str:
    return f"routectl migrate --warehouse {warehouse}"


def require_group_layout(warehouse: str | Path) -> None:
    """Raise OldLayoutError, naming the command that upgrades it, on a per-topic warehouse."""
    reason = old_layout_reason(warehouse)
    if reason is not None:
        raise OldLayoutError(
            f"warehouse {warehouse} holds the per-topic layout of routelake before issue 36 "
            f"({reason}). Stop the job and run `{migrate_command(warehouse)}` to upgrade it "
            "in place (docs/operations.md, 'Upgrading a warehouse to the group layout'), or "
            "re-backfill into a new warehouse with `routectl backfill`"
        )
