"""History tables from Delta (delta-rs): as-of reconstruction and per-topic/broker views.

topic_route_history is derived from the group layout's change tables when read (issue 36,
read/route_history.py); every other history table is read as stored."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from routing_lib.core.admin import ADMIN_EVENTS
from routing_lib.core.as_of import as_of
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    HISTORY_TABLES,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.tables import Row
from routing_lib.read import route_history
from routing_lib.read.arrow_filters import Filter, read_table
from routing_lib.read.warehouse import WarehouseError, load_snapshot, open_optional, open_table


def read_history_table(
    warehouse: str | Path, table: str, filters: Sequence[Filter] | None = None
) -> pa.Table:
    """One history table as Arrow (the rows matching delta-rs `filters`): stored tables as
    read, topic_route_history derived from the change tables."""
    if table == TOPIC_ROUTE_HISTORY:
        return route_history.read_history(warehouse, filters)
    return read_table(open_table(warehouse, table), filters)


def load_history(
    warehouse: str | Path,
    filters: Mapping[str, list[Filter]] | None = None,
    tables: Sequence[str] = HISTORY_TABLES,
) -> dict[str, list[Row]]:
    """Every history table (or `tables`; the rows matching delta-rs `filters` per table)."""
    return {
        table: read_history_table(warehouse, table, (filters or {}).get(table)).to_pylist()
        for table in tables
    }


def as_of_dump(warehouse: str | Path, at: int) -> dict[str, Any]:
    """brokerAddrTable, clusterAddrTable, topicQueueTable and the live brokers at event time
    `at`, from the history tables alone. Refuses times past the published watermark: what
    happens after it (an expiry, say) is not known yet."""
    watermark = load_snapshot(warehouse).watermark
    if watermark is None or at > watermark:
        raise WarehouseError(
            f"--at {at} is after the published watermark {watermark}: "
            "the history is not final there yet"
        )
    # topicQueueTable at T from the base rows and overlays valid at T: no history derived
    stored = [table for table in HISTORY_TABLES if table != TOPIC_ROUTE_HISTORY]
    topic_queue = route_history.route_rows_at(warehouse, at)
    return as_of(load_history(warehouse, tables=stored), at, topic_queue)


def _overlaps(row: Row, start: int | None, end: int | None) -> bool:
    valid_to = row["valid_to"]
    return (end is None or row["valid_from"] < end) and (
        start is None or valid_to is None or valid_to > start
    )


def topic_history(
    warehouse: str | Path, topic: str, start: int | None = None, end: int | None = None
) -> list[Row]:
    rows = route_history.topic_history_rows(warehouse, topic)
    return sorted(
        (r for r in rows if _overlaps(r, start, end)),
        key=lambda r: (r["valid_from"], r["broker_name"]),
    )


def broker_history(warehouse: str | Path, broker_name: str) -> dict[str, list[Row]]:
    by_name = [("broker_name", "=", broker_name)]
    members = read_table(open_table(warehouse, BROKER_MEMBERSHIP_HISTORY), by_name).to_pylist()
    liveness = read_table(open_table(warehouse, BROKER_LIVENESS_EVENTS), by_name).to_pylist()
    return {
        "membership": sorted(members, key=lambda r: (r["valid_from"], r["broker_id"])),
        "liveness": sorted(liveness, key=lambda r: (r["event_time"], r["seq"])),
    }


def admin_history(
    warehouse: str | Path, start: int | None = None, end: int | None = None
) -> list[Row]:
    """admin_events rows with start <= event_time < end, by event time then arrival (an
    older warehouse without the table has none)."""
    delta = open_optional(warehouse, ADMIN_EVENTS)
    if delta is None:
        return []
    filters = [
        *([("event_time", ">=", start)] if start is not None else []),
        *([("event_time", "<", end)] if end is not None else []),
    ]
    rows = read_table(delta, filters).to_pylist()
    return sorted(rows, key=lambda r: (r["event_time"], r["source"] or "", r["position"] or 0))
