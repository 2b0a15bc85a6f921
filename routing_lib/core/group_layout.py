"""The step's rows of the group layout (issue 36): what one step call of a broker group
writes to topic_base, topic_overlay and their change tables.

* `topic_base` (CHANGE): the step's net upserts and deletes of the group's base rows, found
  with C-level set operations on the two base tables (core/group_facts.py `base_changes`): a
  fault leaves the base object as it was and writes none;
* `topic_overlay` (CHANGE): the group's one row after the step, when it changed; a group has
  a row while its base holds a topic (a delete when it holds none any more);
* `topic_base_changes` / `topic_overlay_changes` (HISTORY, appended by identity): one row per
  fact of the step's transitions (core/fact_rows.py `fact_row`).

Nothing here reads the group's effective slice: a fault of a 10 000-topic group is one
overlay row and one overlay change row, with no loop per topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
)
from routing_lib.core.fact_rows import (
    base_change_row,
    base_row,
    fact_columns,
    fact_row,
    overlay_row,
)
from routing_lib.core.group_facts import BaseRowChange, GroupFact, base_changes
from routing_lib.core.overlay import GroupTopics
from routing_lib.core.rows import RowKind, RowOp
from routing_lib.core.tables import Row


class Bundles(Protocol):
    """The step's output rows by (kind, table, op) (core/step.py `_GroupBatch.bundles`)."""

    def __getitem__(self, key: tuple[RowKind, str, RowOp]) -> list[Row]: ...


def _overlay_of(group: str, state: GroupTopics) -> Row | None:
    """The group's topic_overlay row, or None while its base holds no topic."""
    return overlay_row(group, state.overlay) if state.base else None


def add_route_rows(bundles: Bundles, group: str, before: GroupTopics, after: GroupTopics) -> int:
    """topic_base's and topic_overlay's changes from `before` to `after`; how many rows."""
    if before is after:
        return 0
    written = 0
    if before.base is not after.base:
        gone, changed = base_changes(before.base, after.base)  # what state_facts would say
        if gone:
            deletes = bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.DELETE]
            deletes += [{"topic": topic, "broker_name": group} for topic in gone]
        if changed:
            rows = after.base.rows()
            upserts = bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.UPSERT]
            upserts += [base_row(group, topic, rows[topic]) for topic in changed]
        written += len(gone) + len(changed)
    old, new = _overlay_of(group, before), _overlay_of(group, after)
    if new != old:
        if new is None:
            bundles[RowKind.CHANGE, TOPIC_OVERLAY, RowOp.DELETE].append({"broker_name": group})
        else:
            bundles[RowKind.CHANGE, TOPIC_OVERLAY, RowOp.UPSERT].append(new)
        written += 1
    return written


def add_history_rows(bundles: Bundles, facts: Iterable[GroupFact]) -> None:
    """One change row per fact, appended by identity."""
    shared: tuple[object, ...] | None = None  # the transition whose columns `common` holds
    common: Row = {}
    base_changes: list[Row] | None = None  # the bundle, taken once there is a row for it
    for fact in facts:
        if isinstance(fact, BaseRowChange):
            # a transition's facts share their columns: built once (a cold registration
            # has 10 000 base facts)
            key = (fact.group, fact.event_time, fact.seq, fact.cause)
            if key != shared:
                shared, common = key, fact_columns(fact)
            if base_changes is None:
                base_changes = bundles[RowKind.HISTORY, TOPIC_BASE_CHANGES, RowOp.APPEND]
            base_changes.append(base_change_row(common, fact.topic, fact.row))
        else:
            bundles[RowKind.HISTORY, TOPIC_OVERLAY_CHANGES, RowOp.APPEND].append(fact_row(fact))
