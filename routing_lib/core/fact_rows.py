"""Group-level facts as the rows of the group layout's tables, and back (issue 36).

The tables are in core/catalog.py (`GROUP_ROUTE_SPECS`, `GROUP_HISTORY_SPECS`):

* `topic_base`: a group's base rows, keyed (topic, broker_name) — `base_row`;
* `topic_overlay`: one row per group — `overlay_row` / `overlay_of_row`;
* `topic_base_changes` / `topic_overlay_changes`: one row per fact — `fact_row`, and
  `facts_of_rows` turns them back into the facts `NormalisedHistory` and
  `topic_route_history_rows` take (core/group_facts.py).

Pure Python: the step emits these rows, the writer commits them, the readers read them.
"""

from __future__ import annotations

from collections.abc import Iterable

from routing_lib.core.group_facts import (
    BaseRowChange,
    GroupFact,
    GroupOverlayChange,
    TransitionFacts,
)
from routing_lib.core.history import event_date
from routing_lib.core.overlay import Overlay, PermOp
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData

_QUEUE_FIELDS = QueueData._fields  # read_queue_nums, write_queue_nums, perm, topic_sys_flag


def base_row(group: str, topic: str, queue: QueueData) -> Row:
    """A topic_base (or topic_queue_table) row."""
    # spelled out, not `**queue._asdict()`: a cold start builds 10 000 per group
    read, write, perm, flag = queue
    return {
        "topic": topic,
        "broker_name": group,
        "read_queue_nums": read,
        "write_queue_nums": write,
        "perm": perm,
        "topic_sys_flag": flag,
    }


def queue_of_row(row: Row) -> QueueData:
    return QueueData(*(int(row[name]) for name in _QUEUE_FIELDS))


def _overlay_columns(overlay: Overlay) -> Row:
    covered = None if overlay.covered is None else sorted(overlay.covered)
    return {"present": overlay.present, "perm_op": overlay.perm_op.value, "covered": covered}


def overlay_row(group: str, overlay: Overlay) -> Row:
    """A topic_overlay row."""
    return {"broker_name": group, **_overlay_columns(overlay)}


def overlay_of_row(row: Row) -> Overlay:
    covered = row["covered"]
    return Overlay(
        bool(row["present"]),
        PermOp(row["perm_op"]),
        None if covered is None else frozenset(covered),
    )


def fact_row(fact: GroupFact) -> Row:
    """The topic_base_changes or topic_overlay_changes row of one fact."""
    common = fact_columns(fact)
    if isinstance(fact, GroupOverlayChange):
        return {**common, **_overlay_columns(fact.overlay)}
    return base_change_row(common, fact.topic, fact.row)


def fact_columns(fact: GroupFact | TransitionFacts) -> Row:
    """The columns every fact of one transition of a group shares."""
    kind, address = fact.cause
    return {
        "broker_name": fact.group,
        "event_time": fact.event_time,
        "seq": fact.seq,
        "cause": kind,
        "cause_broker_addr": address,
        "event_date": event_date(fact.event_time),
    }


def base_change_row(common: Row, topic: str, queue: QueueData | None) -> Row:
    """A topic_base_changes row: the transition's `common` columns (fact_columns) and one
    topic's base row after it (None: the topic left the base)."""
    if queue is None:
        return {**common, "topic": topic, "in_base": False, **_NO_QUEUE}
    read, write, perm, flag = queue
    return {
        **common,
        "topic": topic,
        "in_base": True,
        "read_queue_nums": read,
        "write_queue_nums": write,
        "perm": perm,
        "topic_sys_flag": flag,
    }


_NO_QUEUE: Row = dict.fromkeys(_QUEUE_FIELDS)


def facts_of_rows(base_changes: Iterable[Row], overlay_changes: Iterable[Row]) -> list[GroupFact]:
    """The facts back from their rows, in the order `NormalisedHistory.apply` needs: by group,
    then (event_time, seq); a transition's base rows before its overlay."""
    facts: list[tuple[tuple[str, int, int, int], GroupFact]] = []
    for row in base_changes:
        queue = queue_of_row(row) if row["in_base"] else None
        fact: GroupFact = BaseRowChange(
            row["broker_name"],
            row["topic"],
            queue,
            int(row["event_time"]),
            int(row["seq"]),
            (row["cause"], row["cause_broker_addr"]),
        )
        facts.append(((fact.group, fact.event_time, fact.seq, 0), fact))
    for row in overlay_changes:
        o = overlay_of_row(row)
        fact = GroupOverlayChange(
            row["broker_name"],
            o.present,
            o.perm_op,
            o.covered,
            int(row["event_time"]),
            int(row["seq"]),
            (row["cause"], row["cause_broker_addr"]),
        )
        facts.append(((fact.group, fact.event_time, fact.seq, 1), fact))
    facts.sort(key=lambda keyed: keyed[0])
    return [fact for _, fact in facts]
