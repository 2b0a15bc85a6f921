"""A per-topic topic_route_history as the group layout's facts, exactly (routectl migrate).

Pure: rows in, facts out, and the check that the derivation (core/group_facts.py
`NormalisedHistory` -> `topic_route_history_rows`) gives the stored rows back, row for row.

**History.** Each stored version becomes base-row changes of its (group, topic) under a
trivial overlay, where the derivation is the identity on values. What must be chosen are the
points: the derivation names a version's reasons from the cause's kind and whether the topic
is held on the other side of the point (`_start_reason` / `_end_reason`). A version that
starts where another ends by the same cause is one point; otherwise the boundary is a short
chain of points at the same instant (seq -4..-2) through None or through a placeholder row
that no version shows (zero length in time: dropped, as HistoryTracker drops them), so the
end is "kept" or not, and the start too, as the stored reasons say.

**The state.** The job's checkpoint holds each group's base B and overlay O (format 2/3),
and its next facts are changes of those. So the migrated tables must hold B and O, not the
effective rows: a group absent at migration time keeps its base, and its return writes only
an overlay row. One anchor per group at the migration instant M (seq -1, cause MIGRATED)
turns the effective rows E into B and sets O. Because `perm_op(B ∩ covered) = E` for a
present group (and E is empty for an absent one), the effective rows do not change at M and
the derivation writes no version there; the check proves it.

Negative seqs put the migrated points before any transition the job records at the same
instant (the job numbers its transitions from 0; M is the last published watermark, and
later transitions are after it anyway).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from routing_lib.core.fact_rows import queue_of_row
from routing_lib.core.group_facts import (
    BaseRowChange,
    Cause,
    GroupFact,
    GroupOverlayChange,
    NormalisedHistory,
    _end_reason,
    _start_reason,
    topic_route_history_rows,
)
from routing_lib.core.overlay import GroupTopics
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData

MIGRATED = "MIGRATED"  # the cause of the anchor facts (never a reason: nothing changes there)
ANCHOR_SEQ = -1
_CHAIN_FIRST_SEQ = -4  # a boundary's chain: at most three points, -4..-2
# Rows a boundary's chain may pass through (no stored version shows them): the first that
# differs from both sides.
_PLACEHOLDERS = (QueueData(0, 0, 0, 0), QueueData(0, 0, 0, 1), QueueData(0, 0, 1, 0))
# A version's identity in topic_route_history (its rows are compared on every column).
HISTORY_KEY = ("topic", "broker_name", "valid_from")

Step = tuple[QueueData | None, Cause]  # a point of a chain: the base row after it, its cause


class NotReproducible(Exception):
    """The stored history cannot be written as facts whose derivation gives it back."""

    def __init__(self, problems: list[str], count: int) -> None:
        self.problems = problems
        self.count = count
        super().__init__(f"{count} problem(s), first: {problems[0] if problems else '?'}")


def _start_cause(row: Row) -> Cause:
    return (row["start_event"], row["start_broker_addr"])


def _end_cause(row: Row) -> Cause:
    return (row["end_event"], row["end_broker_addr"])


def _kept_needed(reason: str, kind: str, reason_of: Callable[[str, bool], str]) -> bool | None:
    """Must the topic be held on the other side of the point for this stored reason? None:
    the kind decides the reason alone (admin events)."""
    kept, not_kept = reason_of(kind, True), reason_of(kind, False)
    if kept == not_kept:
        return None
    return bool(reason == kept)


def _placeholder(*sides: QueueData | None) -> QueueData:
    return next(p for p in _PLACEHOLDERS if p not in sides)


def boundary_chain(ending: Row | None, starting: Row | None) -> list[Step]:
    """The points at one instant that end `ending` and start `starting` (either None) with
    the stored reasons."""
    current = queue_of_row(ending) if ending is not None else None
    new = queue_of_row(starting) if starting is not None else None
    between = _placeholder(current, new)
    chain: list[Step] = []
    if ending is not None:
        cause = _end_cause(ending)
        end_kept = _kept_needed(ending["ended_by"], cause[0], _end_reason)
        if (
            starting is not None
            and _start_cause(starting) == cause
            and end_kept is not False
            and _kept_needed(starting["started_by"], cause[0], _start_reason) is not False
            and new != current
        ):
            return [(new, cause)]
        current = between if end_kept else None
        chain.append((current, cause))
    if starting is None:
        if current is not None:  # the placeholder ends at the same instant: no version
            chain.append((None, chain[-1][1]))
        return chain
    cause = _start_cause(starting)
    start_kept = _kept_needed(starting["started_by"], cause[0], _start_reason)
    if start_kept is None:
        start_kept = current is not None
    if start_kept and current is None:
        chain.append((between, cause))
    elif not start_kept and current is not None:
        chain.append((None, cause))
    chain.append((new, cause))
    return chain


def topic_facts(group: str, topic: str, rows: list[Row]) -> list[BaseRowChange]:
    """One (group, topic)'s stored versions as base-row changes (trivial overlay)."""
    facts: list[BaseRowChange] = []

    def at(time: int, chain: list[Step]) -> None:
        for n, (value, cause) in enumerate(chain):
            facts.append(BaseRowChange(group, topic, value, time, _CHAIN_FIRST_SEQ + n, cause))

    previous: Row | None = None
    for row in sorted(rows, key=lambda r: int(r["valid_from"])):
        start = int(row["valid_from"])
        if previous is not None and previous["valid_to"] is not None:
            if int(previous["valid_to"]) != start:
                at(int(previous["valid_to"]), boundary_chain(previous, None))
                previous = None
        elif previous is not None:  # an open version followed by another: not a history
            previous = None
        at(start, boundary_chain(previous, row))
        previous = row
    if previous is not None and previous["valid_to"] is not None:
        at(int(previous["valid_to"]), boundary_chain(previous, None))
    return facts


def anchor_facts(
    group: str, effective: Mapping[str, QueueData], state: GroupTopics, at: int
) -> list[GroupFact]:
    """The facts at the migration instant that turn the effective rows into the state's base
    and set its overlay (none for a group whose overlay is trivial and base is E)."""
    cause: Cause = (MIGRATED, None)
    base = state.base.rows()
    facts: list[GroupFact] = [
        BaseRowChange(group, topic, base.get(topic), at, ANCHOR_SEQ, cause)
        for topic in sorted(effective.keys() | base.keys())
        if effective.get(topic) != base.get(topic)
    ]
    o = state.overlay
    if not o.is_trivial():
        facts.append(
            GroupOverlayChange(group, o.present, o.perm_op, o.covered, at, ANCHOR_SEQ, cause)
        )
    return facts


@dataclass
class GroupMigration:
    """One group's facts: its history's, then its anchor's."""

    group: str
    facts: list[GroupFact] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _key(row: Row) -> tuple[object, ...]:
    return tuple(row[c] for c in HISTORY_KEY)


def _plain(row: Row, columns: Iterable[str]) -> Row:
    return {c: row.get(c) for c in columns}


def migrate_group(
    group: str,
    history: list[Row],
    effective: Mapping[str, QueueData],
    state: GroupTopics | None,
    at: int,
    columns: tuple[str, ...],
) -> GroupMigration:
    """The group's facts, checked: derived from them, its history is `history` row for row,
    and its effective rows at the end are `effective` (topic_queue_table's)."""
    out = GroupMigration(group)
    by_topic: dict[str, list[Row]] = {}
    for row in history:
        by_topic.setdefault(row["topic"], []).append(row)
    for topic in sorted(by_topic):
        out.facts += topic_facts(group, topic, by_topic[topic])
    open_rows = {r["topic"]: queue_of_row(r) for r in history if r["valid_to"] is None}
    if open_rows != dict(effective):
        differ = sorted(open_rows.keys() ^ effective.keys()) or sorted(
            t for t in open_rows if open_rows[t] != effective[t]
        )
        out.problems.append(
            f"group {group}: the open history rows and topic_queue_table differ "
            f"(topics {', '.join(differ[:5])})"
        )
        return out
    if state is not None:
        out.facts += anchor_facts(group, effective, state, at)
    normalised = NormalisedHistory()
    normalised.apply(sorted(out.facts, key=_fact_order))
    derived = {
        _key(r): _plain(r, columns)
        for r in topic_route_history_rows(normalised.base, normalised.overlay)
    }
    stored = {_key(r): _plain(r, columns) for r in history}
    for key in sorted(stored.keys() | derived.keys(), key=str):
        if stored.get(key) != derived.get(key):
            out.problems.append(
                f"group {group}: version {key} stored as {stored.get(key)}, "
                f"derived as {derived.get(key)}"
            )
    return out


def _fact_order(fact: GroupFact) -> tuple[int, int, int]:
    # a transition's base rows before its overlay, as core/fact_rows.facts_of_rows orders
    return (fact.event_time, fact.seq, isinstance(fact, GroupOverlayChange))
