"""History tables from Delta (delta-rs): as-of reconstruction and per-topic/broker views."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from routing_lib.core.admin import ADMIN_EVENTS
from routing_lib.core.as_of import as_of
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    HISTORY_TABLES,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.tables import Row
from routing_lib.read.arrow_filters import Filter, read_table
from routing_lib.read.warehouse import WarehouseError, load_snapshot, open_optional, open_table


def load_history(
    warehouse: str | Path, filters: dict[str, list[Filter]] | None = None
) -> dict[str, list[Row]]:
    """Every history table (or the rows matching delta-rs `filters` per table)."""
    out = {}
    for table in HISTORY_TABLES:
        delta = open_table(warehouse, table)
        out[table] = read_table(delta, (filters or {}).get(table)).to_pylist()
    return out


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
    return as_of(load_history(warehouse), at)


def _overlaps(row: Row, start: int | None, end: int | None) -> bool:
    valid_to = row["valid_to"]
    return (end is None or row["valid_from"] < end) and (
        start is None or valid_to is None or valid_to > start
    )


def topic_history(
    warehouse: str | Path, topic: str, start: int | None = None, end: int | None = None
) -> list[Row]:
    rows = read_table(
        open_table(warehouse, TOPIC_ROUTE_HISTORY), [("topic", "=", topic)]
    ).to_pylist()
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
