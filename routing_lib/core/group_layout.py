"""The step's rows of the group layout (issue 36): what one step call of a broker group
writes to topic_base, topic_overlay and their change tables.

* `topic_base` (CHANGE): the step's net upserts and deletes of the group's base rows, found
  with C-level set operations on the two base tables (core/group_facts.py `base_changes`), as
  one columnar block per op (core/columnar.py): a fault leaves the base object as it was and
  writes none;
* `topic_overlay` (CHANGE): the group's one row after the step, when it changed; a group has
  a row while its base holds a topic (a delete when it holds none any more);
* `topic_base_changes` / `topic_overlay_changes` (HISTORY, appended by identity): one row per
  fact of the step's transitions (core/fact_rows.py `fact_row`); a transition's base facts as
  one columnar block, built from its lists of topics without a fact object per topic.

Nothing here reads the group's effective slice: a fault of a 10 000-topic group is one
overlay row and one overlay change row, with no loop per topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from routing_lib.core.catalog import (
    TOPIC_BASE,
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY,
    TOPIC_OVERLAY_CHANGES,
)
from routing_lib.core.fact_rows import fact_columns, fact_row, overlay_row
from routing_lib.core.group_facts import TransitionFacts, base_changes
from routing_lib.core.overlay import GroupTopics
from routing_lib.core.rows import RowKind, RowOp
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData


class Bundles(Protocol):
    """The step's output rows by (kind, table, op) (core/step.py `_GroupBatch.bundles`)."""

    def __getitem__(self, key: tuple[RowKind, str, RowOp]) -> list[Row]: ...


def _overlay_of(group: str, state: GroupTopics) -> Row | None:
    """The group's topic_overlay row, or None while its base holds no topic."""
    return overlay_row(group, state.overlay) if state.base else None


def add_route_rows(bundles: Bundles, group: str, before: GroupTopics, after: GroupTopics) -> int:
    """topic_base's and topic_overlay's changes from `before` to `after`; how many rows.
    topic_base's are one block of each op (core/columnar.py)."""
    if before is after:
        return 0
    written = 0
    if before.base is not after.base:
        gone, changed = base_changes(before.base, after.base)  # what state_facts would say
        if gone:
            deletes = bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.DELETE]
            deletes.append({"broker_name": group, "topic": gone})
        if changed:
            upserts = bundles[RowKind.CHANGE, TOPIC_BASE, RowOp.UPSERT]
            upserts.append({"broker_name": group, **queue_columns(changed, after.base.rows())})
        written += len(gone) + len(changed)
    old, new = _overlay_of(group, before), _overlay_of(group, after)
    if new != old:
        if new is None:
            bundles[RowKind.CHANGE, TOPIC_OVERLAY, RowOp.DELETE].append({"broker_name": group})
        else:
            bundles[RowKind.CHANGE, TOPIC_OVERLAY, RowOp.UPSERT].append(new)
        written += 1
    return written


def queue_columns(topics: list[str], rows: Mapping[str, QueueData]) -> Row:
    """The row columns of these topics' base rows (at least one): topic and the queue
    columns, as arrays (transposed in C: a cold registration has 10 000)."""
    # (zip(*...) over the list: each QueueData has the four fields)
    columns = zip(*list(map(rows.__getitem__, topics)), strict=False)
    return {"topic": topics, **dict(zip(QueueData._fields, columns, strict=True))}


def add_history_rows(bundles: Bundles, transitions: Iterable[TransitionFacts]) -> None:
    """A transition's base row changes as one topic_base_changes block (gone topics first,
    then the added or changed ones: the facts' order); an overlay change as its row."""
    for t in transitions:
        if t.gone or t.changed:
            block = {**fact_columns(t), **_change_columns(t)}
            bundles[RowKind.HISTORY, TOPIC_BASE_CHANGES, RowOp.APPEND].append(block)
        overlay = t.overlay_fact()
        if overlay is not None:
            bundles[RowKind.HISTORY, TOPIC_OVERLAY_CHANGES, RowOp.APPEND].append(fact_row(overlay))


def _change_columns(t: TransitionFacts) -> Row:
    gone, changed = t.gone, t.changed
    if not gone:  # a registration's added or changed topics only (a cold start: all)
        assert t.rows is not None
        return {"in_base": [True] * len(changed), **queue_columns(changed, t.rows)}
    nulls = [None] * len(gone)
    if not changed:
        queues = dict.fromkeys(QueueData._fields, nulls)
        return {"topic": gone, "in_base": [False] * len(gone), **queues}
    assert t.rows is not None
    present = queue_columns(changed, t.rows)
    return {
        "topic": [*gone, *changed],
        "in_base": [False] * len(gone) + [True] * len(changed),
        **{name: [*nulls, *present[name]] for name in QueueData._fields},
    }
