"""The job's side of DELETE_TOPIC (routing_lib/core/admin.py, docs/architecture.md): reads of
the published tables from Python workers, at most once per micro-batch per worker.

* fan-out (stage one, classify): a DELETE_TOPIC row gets a copy keyed to every brokerName that
  holds the topic in its published base (topic_base: present or absent, issue 36; an absent
  group keeps its base, and a DELETE_TOPIC must reach it before it returns);
* the admin log (the step): DELETE_TOPIC events of earlier micro-batches, from admin_events.

Both read the tables the previous micro-batch committed: foreachBatch of batch M-1 finishes
before batch M's tasks start.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar, cast

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark import TaskContext

from routing_lib import storage
from routing_lib.core.admin import ADMIN_EVENTS, ADMIN_KEY, delete_from_row
from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.core.clock import Arrival
from routing_lib.core.history import event_date
from routing_lib.core.wire import unpack_event
from routing_lib.ingest import Classified
from routing_lib.read.arrow_filters import read_table
from schemas.route_event import DeleteTopicEvent

# Python workers are reused across batches and queries: keyed by warehouse and batch id.
_holders_cache: dict[tuple[str, int | None, str], list[str]] = {}
_log_cache: dict[tuple[str, int | None, int], list[tuple[Arrival, DeleteTopicEvent]]] = {}
_CACHE_LIMIT = 256
_Key = TypeVar("_Key", bound=tuple[Any, ...])  # (warehouse, batch id, ...)
_Value = TypeVar("_Value")


def _batch_id() -> int | None:
    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return int(value) if value is not None else None


def _table(warehouse: str, table: str) -> DeltaTable | None:
    try:
        return storage.open_delta(storage.join(warehouse, table))
    except TableNotFoundError:
        return None


def _bounded(cache: dict[_Key, _Value], key: _Key) -> dict[_Key, _Value]:
    """The cache to use for `key`: none outside a micro-batch (nothing says when it is stale)."""
    if key[1] is None:
        return {}
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
    return cache


def holders(warehouse: str, topic: str) -> list[str]:
    """brokerNames holding `topic` in the published topic_base (present or absent)."""
    key = (warehouse, _batch_id(), topic)
    cache = _bounded(_holders_cache, key)
    if key not in cache:
        delta = _table(warehouse, TOPIC_BASE)
        rows = (
            []
            if delta is None
            else read_table(delta, [("topic", "=", topic)], ["broker_name"]).to_pylist()
        )
        cache[key] = sorted({r["broker_name"] for r in rows})
    return cache[key]


def fan_out_deletes(items: list[Classified], warehouse: str | None) -> list[Classified]:
    """Add a copy of every DELETE_TOPIC for each group holding its topic (same arrival)."""
    if warehouse is None or not any(c.group_key == ADMIN_KEY for c in items):
        return items
    copies = []
    for item in items:
        if item.group_key == ADMIN_KEY and item.payload is not None:
            # the admin group's only events are DELETE_TOPICs (core.admin.group_key)
            topic = cast(DeleteTopicEvent, unpack_event(item.payload)).topic
            copies += [replace(item, group_key=name) for name in holders(warehouse, topic)]
    return items + copies


def logged_deletes(warehouse: str, published: int) -> list[tuple[Arrival, DeleteTopicEvent]]:
    """DELETE_TOPIC events in the admin log newer than the published watermark (older ones
    no group can still need: docs/architecture.md)."""
    key = (warehouse, _batch_id(), published)
    cache = _bounded(_log_cache, key)
    if key not in cache:
        delta = _table(warehouse, ADMIN_EVENTS)
        rows = (
            []
            if delta is None
            else read_table(
                delta,
                columns=[
                    "event_time",
                    "topic",
                    "cluster_name",
                    "requested_by",
                    "source",
                    "position",
                ],
                filters=[
                    ("event_date", ">=", event_date(published)),
                    ("event_type", "=", "DELETE_TOPIC"),
                    ("event_time", ">", published),
                ],
            ).to_pylist()
        )
        cache[key] = sorted(
            (delete_from_row(r) for r in rows), key=lambda item: (item[1].eventTime, item[0])
        )
    return cache[key]
