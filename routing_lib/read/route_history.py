"""topic_route_history and State(T)'s topicQueueTable from the group layout's change tables.

Since issue 36 the job stores `topic_base_changes` (one row per change of a group's base row)
and `topic_overlay_changes` (one row per change of a group's overlay: one per fault), and
topic_route_history is derived when read (catalog: `derived_from`). Every reader goes
through this module:

* `read_changes`: the two tables (delta-rs), pushing what can be pushed: for one topic, that
  topic's base changes and the overlay changes of the groups that ever held it; for an as-of
  at T, the rows with event_time <= T;
* `history_rows` / `history_table`: today's topic_route_history rows, row for row, via
  `facts_of_rows` -> `NormalisedHistory` -> `topic_route_history_rows` (core/group_facts.py);
* `routes_at`: topicQueueTable at T without deriving any history: per group the overlay
  valid at T, per (group, topic) the base row valid at T (the last change at or before T, by
  (event_time, seq): a mask over the rows once `base_intervals` gave each the time its key
  changes next), joined and `perm_op` applied in Arrow.

A filter on `topic` or `broker_name` is exact on the change tables too: a (topic, group)'s
versions come from its own base rows and its group's overlay only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from routing_lib.core.catalog import (
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    TOPIC_QUEUE,
    TOPIC_ROUTE_HISTORY,
)
from routing_lib.core.fact_rows import facts_of_rows
from routing_lib.core.group_facts import NormalisedHistory, topic_route_history_rows
from routing_lib.core.overlay import PERM_READ, PERM_READ_WRITE, PERM_WRITE, PermOp
from routing_lib.core.tables import Row
from routing_lib.layout import require_group_layout
from routing_lib.read.arrow_filters import Filter, expression, read_table
from routing_lib.read.arrow_schema import arrow_schema
from routing_lib.read.warehouse import WarehouseError, open_optional

QUEUE_COLUMNS = ("read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")


class ChangeTables(NamedTuple):
    base: pa.Table  # topic_base_changes rows
    overlay: pa.Table  # topic_overlay_changes rows


def _open_changes(warehouse: str | Path, table: str) -> DeltaTable:
    delta = open_optional(warehouse, table)
    if delta is not None:
        return delta
    require_group_layout(warehouse)  # a per-topic warehouse: a stop naming routectl migrate
    raise WarehouseError(
        f"{warehouse} has no {table}: run `routectl backfill` or `routectl run` first"
    )


def read_changes(
    warehouse: str | Path,
    topic: str | None = None,
    broker_names: Sequence[str] | None = None,
    until: int | None = None,
) -> ChangeTables:
    """The change tables' rows, pushed down: `topic` (its base changes, and the overlay
    changes of the groups in them), `broker_names` (those groups' rows), `until` (rows with
    event_time <= until: enough for any state at or before it)."""
    base_filters: list[Filter] = []
    overlay_filters: list[Filter] = []
    if until is not None:
        base_filters.append(("event_time", "<=", until))
        overlay_filters.append(("event_time", "<=", until))
    if broker_names is not None:
        base_filters.append(("broker_name", "in", list(broker_names)))
        overlay_filters.append(("broker_name", "in", list(broker_names)))
    if topic is not None:
        base_filters.append(("topic", "=", topic))
    base = read_table(_open_changes(warehouse, TOPIC_BASE_CHANGES), base_filters)
    if topic is not None:
        groups = pc.unique(base["broker_name"]).to_pylist()
        overlay_filters.append(("broker_name", "in", groups))
        if not groups:
            return ChangeTables(base, arrow_schema(TOPIC_OVERLAY_CHANGES).empty_table())
    overlay = read_table(_open_changes(warehouse, TOPIC_OVERLAY_CHANGES), overlay_filters)
    return ChangeTables(base, overlay)


def of_topic(changes: ChangeTables, topic: str) -> ChangeTables:
    """The part of `changes` one topic's history needs (read tables already in memory)."""
    base = changes.base.filter(pc.equal(changes.base["topic"].cast(pa.string()), topic))
    groups = pc.unique(base["broker_name"].cast(pa.string()))
    overlay = changes.overlay.filter(
        pc.is_in(changes.overlay["broker_name"].cast(pa.string()), value_set=groups)
    )
    return ChangeTables(base, overlay)


# ---- topic_route_history -----------------------------------------------------------------------


def history_rows(changes: ChangeTables) -> list[Row]:
    """Today's topic_route_history rows from the change rows (pure core derivation)."""
    normalised = NormalisedHistory()
    normalised.apply(facts_of_rows(changes.base.to_pylist(), changes.overlay.to_pylist()))
    return topic_route_history_rows(normalised.base, normalised.overlay)


def history_table(rows: Iterable[Row]) -> pa.Table:
    """Derived rows as an Arrow table of topic_route_history's schema (as the stored table
    read)."""
    return pa.Table.from_pylist(list(rows), schema=arrow_schema(TOPIC_ROUTE_HISTORY))


def _pushed_down(filters: Sequence[Filter]) -> tuple[str | None, list[str] | None]:
    """The topic and broker names a conjunction of filters pins, if any (= or in)."""
    topic: str | None = None
    groups: list[str] | None = None
    for column, op, value in filters:
        if column == "topic" and op in ("=", "=="):
            topic = value
        elif column == "broker_name" and op in ("=", "=="):
            groups = [value]
        elif column == "broker_name" and op == "in":
            groups = list(value)
    return topic, groups


def read_history(warehouse: str | Path, filters: Sequence[Filter] | None = None) -> pa.Table:
    """topic_route_history derived from the warehouse's change tables, as an Arrow table
    (rows matching `filters`, delta-rs DNF conjunction, as on the stored table before)."""
    topic, groups = _pushed_down(filters or ())
    table = history_table(history_rows(read_changes(warehouse, topic, groups)))
    condition = expression(filters)
    return table if condition is None else table.filter(condition)


def topic_history_rows(warehouse: str | Path, topic: str) -> list[Row]:
    """One topic's topic_route_history rows (its base changes, its groups' overlays)."""
    return history_rows(read_changes(warehouse, topic))


# ---- topicQueueTable at T ------------------------------------------------------------------------


NEXT_TIME = "next_time"  # base_intervals: the event_time of the key's next change (null: none)
BASE_KEYS = ["broker_name", "topic"]
OVERLAY_KEYS = ["broker_name"]


def _key_codes(table: pa.Table, keys: list[str]) -> npt.NDArray[np.int64]:
    """One int64 per row, equal for rows of equal `keys` (dictionary codes combined)."""
    code = np.zeros(table.num_rows, np.int64)
    for name in keys:
        encoded = pc.dictionary_encode(table[name].combine_chunks())
        values = len(encoded.dictionary)
        code = code * max(values, 1) + encoded.indices.to_numpy(zero_copy_only=False)
    return code


def with_next_change(table: pa.Table, keys: list[str]) -> pa.Table:
    """The change rows with `next_time`: when the same key changes next (null: never), so
    that a row is the key's value at T iff event_time <= T < next_time (a row followed by
    another at the same instant has next_time == event_time: never a value). One sort of
    integer codes; then every State(T) is a mask, as over the stored history before."""
    if NEXT_TIME in table.column_names:
        return table
    if not table.num_rows:
        return table.append_column(NEXT_TIME, pa.array([], pa.int64()))
    key = _key_codes(table, keys)
    times = table["event_time"].to_numpy()
    order = np.lexsort((table["seq"].to_numpy(), times, key))
    same_next = key[order[1:]] == key[order[:-1]]
    following = np.zeros(len(order), np.int64)
    following[order[:-1]] = np.where(same_next, times[order[1:]], 0)
    last = np.ones(len(order), bool)
    last[order[:-1]] = ~same_next
    return table.append_column(NEXT_TIME, pa.array(following, pa.int64(), mask=last))


def _valid_at(table: pa.Table, at: int) -> pa.Array:
    started = pc.less_equal(table["event_time"], at)
    return pc.and_(
        started, pc.or_kleene(pc.is_null(table[NEXT_TIME]), pc.greater(table[NEXT_TIME], at))
    )


def base_intervals(changes: ChangeTables) -> ChangeTables:
    """`changes` with NEXT_TIME on both tables: what routes_at needs for any T (the console
    computes it once per table version and asks many T)."""
    return ChangeTables(
        with_next_change(changes.base, BASE_KEYS),
        with_next_change(changes.overlay, OVERLAY_KEYS),
    )


def _apply_perm_op(perm: pa.ChunkedArray, ops: pa.Array) -> pa.Array:
    """PermOp.apply, vectorised: ID keeps perm, WIPE clears the write bit, RW/R set it."""
    perm = perm.combine_chunks()
    return pc.case_when(
        pc.make_struct(
            pc.equal(ops, PermOp.WIPE.value),
            pc.equal(ops, PermOp.RW.value),
            pc.equal(ops, PermOp.R.value),
        ),
        pc.bit_wise_and(perm, pa.scalar(~PERM_WRITE, perm.type)),
        pa.scalar(PERM_READ_WRITE, perm.type),
        pa.scalar(PERM_READ, perm.type),
        perm,
    )


def routes_at(changes: ChangeTables, at: int) -> pa.Table:
    """topic_queue_table's rows of State(at): each group's base rows valid at `at` under its
    overlay valid at `at` (a group with no overlay change yet has a trivial one). Equal to
    the derived topic_route_history rows valid at `at`, without deriving them."""
    schema = arrow_schema(TOPIC_QUEUE)
    changes = base_intervals(changes)  # a no-op when the caller prepared them
    valid = pc.and_(_valid_at(changes.base, at), changes.base["in_base"])
    base = changes.base.select(["topic", "broker_name", *QUEUE_COLUMNS]).filter(valid)
    base = base.cast(schema)
    overlay = changes.overlay.filter(_valid_at(changes.overlay, at))
    overlays = {  # at most one per group: a few hundred rows
        r["broker_name"]: r
        for r in overlay.to_pylist()
        if (r["present"], r["perm_op"], r["covered"]) != (True, PermOp.ID.value, None)
    }
    if not base.num_rows or not overlays:
        return base
    groups = base["broker_name"].combine_chunks()
    names = pa.array(list(overlays), pa.string())
    which = pc.index_in(groups, value_set=names)  # null: a trivial overlay
    ops = pc.fill_null(
        pc.take(pa.array([o["perm_op"] for o in overlays.values()], pa.string()), which),
        PermOp.ID.value,
    )
    keep = pc.fill_null(
        pc.take(pa.array([bool(o["present"]) for o in overlays.values()]), which), True
    )
    for name, o in overlays.items():
        if o["covered"] is not None:  # rare: a split registration's return in progress
            outside = pc.invert(
                pc.is_in(base["topic"], value_set=pa.array(o["covered"], pa.string()))
            )
            keep = pc.and_not(keep, pc.and_(pc.equal(groups, name), outside))
    base = base.set_column(
        schema.get_field_index("perm"), schema.field("perm"), _apply_perm_op(base["perm"], ops)
    )
    return base.filter(keep)


def route_rows_at(warehouse: str | Path, at: int) -> list[Row]:
    """topic_queue_table rows of State(at) from the warehouse's change tables."""
    rows: list[Row] = routes_at(read_changes(warehouse, until=at), at).to_pylist()
    return rows
