"""The step's rows of the group layout (issue 36): what one step call of a broker group
writes to topic_base, topic_overlay and their change tables.

* `topic_base` (CHANGE): the step's net upserts and deletes of the group's base rows, found
  with C-level set operations on the two base tables (core/group_facts.py `state_facts`): a
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
from routing_lib.core.fact_rows import base_row, fact_row, overlay_row
from routing_lib.core.group_facts import NET, BaseRowChange, GroupFact, state_facts
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
        for fact in state_facts(
            group, GroupTopics(before.base), GroupTopics(after.base), 0, 0, (NET, None)
        ):
            assert isinstance(fact, BaseRowChange)  # the overlays passed are the same
            if fact.row is None:
                key = {"topic": fact.topic, "broker_name": group}
                bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.DELETE].append(key)
            else:
                row = base_row(group, fact.topic, fact.row)
                bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.UPSERT].append(row)
            written += 1
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
    for fact in facts:
        table = TOPIC_BASE_CHANGES if isinstance(fact, BaseRowChange) else TOPIC_OVERLAY_CHANGES
        bundles[RowKind.HISTORY, table, RowOp.APPEND].append(fact_row(fact))
