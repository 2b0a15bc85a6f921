"""Group-level facts of a step, and today's per-topic rows derived from them (issue 36).

A step's transitions (core/history.py `Transition`) change a group's topics as base +
overlay (core/overlay.py). Each transition that changes them emits:

* one `GroupOverlayChange` when the overlay changed (a fault: an expiry, a return with the
  same table, an unregister, a role switch, a perm change): O(1) whatever the group's size;
* one `BaseRowChange` per topic whose base row changed (a topic change: O(changed topics)).

Both carry the transition's time, its rank among the group's transitions at that instant
(`seq`) and its cause (kind, broker address), which is what the history needs.

Derivations, pure and exact against the per-topic layout:

* `topic_queue_rows(base, overlays)`: topicQueueTable's rows from the base rows and one
  overlay per group (what a view over the two stored tables computes);
* `NormalisedHistory`: the facts as intervals, one table of base rows' intervals and one of
  overlay intervals, each interval keyed by (valid_from, from_seq). Intervals that a later
  transition of the same instant ends are kept (zero length): an effective row that changes
  and changes back within one instant is a closed and a new version today, and only the
  intermediate states say so;
* `topic_route_history_rows(base, overlay)`: today's `topic_route_history` rows, row for row,
  from those intervals (tests/test_group_facts.py holds them equal to HistoryTracker's).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from routing_lib.core.history import REGISTER, Transition, _topic_route_changes, event_date
from routing_lib.core.overlay import GroupTopics, Overlay, PermOp
from routing_lib.core.tables import Row
from routing_lib.core.topic_table import QueueData, TopicTable

Cause = tuple[str, str | None]  # (transition kind, the broker address it names)


class GroupOverlayChange(NamedTuple):
    group: str
    present: bool
    perm_op: PermOp
    covered: frozenset[str] | None
    event_time: int
    seq: int
    cause: Cause

    @property
    def overlay(self) -> Overlay:
        return Overlay(self.present, self.perm_op, self.covered)


class BaseRowChange(NamedTuple):
    group: str
    topic: str
    row: QueueData | None  # None: the topic left the base
    event_time: int
    seq: int
    cause: Cause


GroupFact = GroupOverlayChange | BaseRowChange


# The last pair of base tables compared and the result: a step compares the same two tables
# twice when one transition changed the base (its facts, then the step's net rows:
# core/group_layout.py). Tables are immutable, so identity decides; the pair is held, so the
# ids cannot be reused while it is here.
_last_compared: list[tuple[TopicTable, TopicTable, tuple[list[str], list[str]]]] = []


def base_changes(old: TopicTable, new: TopicTable) -> tuple[list[str], list[str]]:
    """(topics gone from the base, topics added or changed), sorted: history's interval ends
    and starts of the two tables (C-level set operations), an end without a start is a
    topic gone. The lists are shared: read them only."""
    if _last_compared and _last_compared[0][0] is old and _last_compared[0][1] is new:
        return _last_compared[0][2]
    ended, started = _topic_route_changes(old, new)
    if not started:
        result: tuple[list[str], list[str]] = (ended, [])
    else:
        starting = set(started)
        result = ([topic for topic in ended if topic not in starting], started)
    _last_compared[:] = [(old, new, result)]
    return result


class TransitionFacts(NamedTuple):
    """The facts of one transition, not expanded: the topics gone from the base and those
    added or changed (`base_changes`' shared lists), the base rows after it, the overlay after
    it when it changed. A cold registration's 10 000 base facts stay three references here:
    the step's rows are built from the lists (core/group_layout.py), and `facts()` makes the
    BaseRowChange tuples only for a reader that wants them (tests, tools)."""

    group: str
    event_time: int
    seq: int
    cause: Cause
    gone: list[str]
    changed: list[str]
    rows: Mapping[str, QueueData] | None  # the base rows after it (None: no base changed)
    overlay: Overlay | None  # None: the overlay did not change

    def facts(self) -> list[GroupFact]:
        """Base rows per changed topic (gone first), then the overlay if it changed."""
        g, time, seq, cause = self.group, self.event_time, self.seq, self.cause
        facts: list[GroupFact] = [
            BaseRowChange(g, topic, None, time, seq, cause) for topic in self.gone
        ]
        if self.changed:
            rows = self.rows
            assert rows is not None
            facts += [
                BaseRowChange(g, topic, rows[topic], time, seq, cause) for topic in self.changed
            ]
        overlay = self.overlay_fact()
        if overlay is not None:
            facts.append(overlay)
        return facts

    def overlay_fact(self) -> GroupOverlayChange | None:
        if self.overlay is None:
            return None
        o = self.overlay
        return GroupOverlayChange(
            self.group, o.present, o.perm_op, o.covered, self.event_time, self.seq, self.cause
        )


def transition_facts(group: str, t: Transition, seq: int) -> list[GroupFact]:
    """The facts of one transition of `group` (none when its topics did not change)."""
    return state_facts(
        group, t.before.topic_state, t.after.topic_state, t.time, seq, (t.kind, t.broker[1])
    )


NET = "NET"  # the cause of a step's net facts (history off: no transitions are seen)


def state_transition(
    group: str, before: GroupTopics, after: GroupTopics, time: int, seq: int, cause: Cause
) -> TransitionFacts | None:
    """The facts that turn `before` into `after`, not expanded (None: no fact)."""
    if before is after:
        return None
    gone: list[str] = []
    changed: list[str] = []
    rows: Mapping[str, QueueData] | None = None
    if before.base is not after.base:
        gone, changed = base_changes(before.base, after.base)
        rows = after.base.rows() if changed else None
    overlay = after.overlay if before.overlay != after.overlay else None
    if not gone and not changed and overlay is None:
        return None
    return TransitionFacts(group, time, seq, cause, gone, changed, rows, overlay)


def state_facts(
    group: str, before: GroupTopics, after: GroupTopics, time: int, seq: int, cause: Cause
) -> list[GroupFact]:
    """The facts that turn `before` into `after`: base rows per changed topic, then the
    overlay if it changed."""
    transition = state_transition(group, before, after, time, seq, cause)
    return [] if transition is None else transition.facts()


def expanded(transitions: Iterable[TransitionFacts]) -> list[GroupFact]:
    """The facts of these transitions, in order."""
    return [fact for t in transitions for fact in t.facts()]


@dataclass
class FactRecorder:
    """Numbers a group's transitions within each instant and collects their facts. All
    transitions of one instant happen in one clock advance (core/history.py), so a recorder
    per advance numbers them the same way whatever the micro-batches."""

    group: str
    transitions: list[TransitionFacts] = field(default_factory=list)
    _instant: int | None = None
    _seq: int = 0

    def record(self, t: Transition) -> None:
        if t.time != self._instant:
            self._instant, self._seq = t.time, 0
        before, after = t.before.topic_state, t.after.topic_state
        cause = (t.kind, t.broker[1])
        facts = state_transition(self.group, before, after, t.time, self._seq, cause)
        if facts is not None:
            self.transitions.append(facts)
        self._seq += 1

    @property
    def facts(self) -> list[GroupFact]:
        return expanded(self.transitions)


# ---- topicQueueTable from base + overlay ------------------------------------------------------


def topic_queue_rows(
    base: dict[tuple[str, str], QueueData], overlays: dict[str, Overlay]
) -> dict[tuple[str, str], Row]:
    """topic_queue_table's rows keyed (topic, broker_name): each group's base rows under its
    overlay (a group without an overlay row has a trivial one)."""
    by_group: dict[str, dict[str, QueueData]] = defaultdict(dict)
    for (group, topic), queue in base.items():
        by_group[group][topic] = queue
    out: dict[tuple[str, str], Row] = {}
    for group, rows in by_group.items():
        overlay = overlays.get(group, Overlay())
        if not overlay.present:
            continue
        for topic, q in rows.items():
            if overlay.covered is not None and topic not in overlay.covered:
                continue
            out[topic, group] = {
                "topic": topic,
                "broker_name": group,
                "read_queue_nums": q.read_queue_nums,
                "write_queue_nums": q.write_queue_nums,
                "perm": overlay.perm_op.apply(q.perm),
                "topic_sys_flag": q.topic_sys_flag,
            }
    return out


@dataclass
class RouteState:
    """The two stored route tables of a base + overlay layout, kept from the facts: base rows
    by (group, topic), one overlay per group."""

    base: dict[tuple[str, str], QueueData] = field(default_factory=dict)
    overlays: dict[str, Overlay] = field(default_factory=dict)
    rows_written: int = 0  # base rows upserted or deleted + overlay rows written

    def apply(self, facts: Iterable[GroupFact]) -> None:
        for fact in facts:
            self.rows_written += 1
            if isinstance(fact, GroupOverlayChange):
                self.overlays[fact.group] = fact.overlay
            elif fact.row is None:
                self.base.pop((fact.group, fact.topic), None)
            else:
                self.base[fact.group, fact.topic] = fact.row


# ---- history: intervals of the base rows and of the overlays ------------------------------------


Point = tuple[int, int]  # (event_time, seq): a transition's place in the group's order


class Interval(NamedTuple):
    """A version of a base row (value: QueueData) or of an overlay (value: Overlay), from one
    transition to the next one that changed it (end None: current)."""

    start: Point
    start_cause: Cause
    value: object
    end: Point | None
    end_cause: Cause | None


@dataclass
class NormalisedHistory:
    """Base-row intervals keyed (group, topic) and overlay intervals keyed by group, each a
    list in order; what the next session stores in Delta (one overlay row per fault)."""

    base: dict[tuple[str, str], list[Interval]] = field(default_factory=lambda: defaultdict(list))
    overlay: dict[str, list[Interval]] = field(default_factory=lambda: defaultdict(list))
    rows_written: int = 0  # interval rows opened or closed

    def apply(self, facts: Iterable[GroupFact]) -> None:
        for fact in facts:
            point = (fact.event_time, fact.seq)
            if isinstance(fact, GroupOverlayChange):
                self._change(self.overlay[fact.group], point, fact.cause, fact.overlay)
            else:
                self._change(self.base[fact.group, fact.topic], point, fact.cause, fact.row)

    def _change(self, intervals: list[Interval], point: Point, cause: Cause, value: object) -> None:
        if intervals and intervals[-1].end is None:
            intervals[-1] = intervals[-1]._replace(end=point, end_cause=cause)
            self.rows_written += 1
        if value is not None:
            intervals.append(Interval(point, cause, value, None, None))
            self.rows_written += 1


_ADMIN_REASONS = {
    "WIPE_WRITE_PERM": "PERM_WIPED",
    "ADD_WRITE_PERM": "PERM_ADDED",
    "DELETE_TOPIC": "TOPIC_DELETED",
}


def _end_reason(kind: str, kept: bool) -> str:
    admin = _ADMIN_REASONS.get(kind)
    if admin:
        return admin
    if kind == REGISTER:
        return "CONFIG_CHANGED" if kept else "TOPIC_DELETED"
    return "PERM_WIPED" if kept else "GROUP_REMOVED"


def _start_reason(kind: str, kept: bool) -> str:
    admin = _ADMIN_REASONS.get(kind)
    if admin:
        return admin
    if not kept:
        return "TOPIC_ADDED"
    return "CONFIG_CHANGED" if kind == REGISTER else "PERM_WIPED"


def _value_at(intervals: list[Interval], point: Point) -> object:
    """The value of the interval holding `point` (a start at the point counts), or None."""
    for interval in reversed(intervals):
        if interval.start <= point:
            return interval.value if interval.end is None or point < interval.end else None
    return None


def _effective(queue: object, overlay: object) -> QueueData | None:
    """A base row under an overlay (covered is by name: the caller filters it)."""
    if not isinstance(queue, QueueData):
        return None
    o = overlay if isinstance(overlay, Overlay) else Overlay()
    return o.perm_op.queue(queue) if o.present else None


def _topic_rows(
    group: str, topic: str, base: list[Interval], overlays: list[Interval]
) -> Iterator[Row]:
    """topic_route_history rows of one (topic, group): walk the points where its base row or
    the group's overlay changed, in order; a version ends where the effective row changes,
    and a version that starts and ends at one instant never showed in any State(T)."""
    causes: dict[Point, Cause] = {}
    for interval in (*base, *overlays):
        causes[interval.start] = interval.start_cause
        if interval.end is not None:
            assert interval.end_cause is not None
            causes[interval.end] = interval.end_cause
    current: QueueData | None = None
    opened: tuple[Point, Cause, QueueData, bool] | None = None  # start, cause, row, kept
    for point in sorted(causes):
        overlay = _value_at(overlays, point)
        queue = _value_at(base, point)
        if isinstance(overlay, Overlay) and overlay.covered is not None:
            queue = queue if topic in overlay.covered else None
        value = _effective(queue, overlay)
        if value == current:
            continue
        kind, addr = causes[point]
        if opened is not None:
            start, start_cause, row, kept = opened
            if start[0] != point[0]:  # zero length in time: dropped, as the tracker does
                yield _history_row(
                    group,
                    topic,
                    start,
                    start_cause,
                    row,
                    kept,
                    point,
                    causes[point],
                    value is not None,
                )
            opened = None
        if value is not None:
            opened = (point, (kind, addr), value, current is not None)
        current = value
    if opened is not None:
        start, start_cause, row, kept = opened
        yield _history_row(group, topic, start, start_cause, row, kept, None, None, False)


def _history_row(
    group: str,
    topic: str,
    start: Point,
    start_cause: Cause,
    q: QueueData,
    kept_at_start: bool,
    end: Point | None,
    end_cause: Cause | None,
    kept_at_end: bool,
) -> Row:
    row: Row = {
        "topic": topic,
        "broker_name": group,
        "valid_from": start[0],
        "read_queue_nums": q.read_queue_nums,
        "write_queue_nums": q.write_queue_nums,
        "perm": q.perm,
        "topic_sys_flag": q.topic_sys_flag,
        "valid_to": None,
        "started_by": _start_reason(start_cause[0], kept_at_start),
        "start_event": start_cause[0],
        "start_broker_addr": start_cause[1],
        "event_date": event_date(start[0]),
        "ended_by": None,
        "end_event": None,
        "end_broker_addr": None,
    }
    if end is not None and end_cause is not None:
        row["valid_to"] = end[0]
        row["ended_by"] = _end_reason(end_cause[0], kept_at_end)
        row["end_event"] = end_cause[0]
        row["end_broker_addr"] = end_cause[1]
    return row


def topic_route_history_rows(
    base: dict[tuple[str, str], list[Interval]], overlay: dict[str, list[Interval]]
) -> list[Row]:
    """Today's topic_route_history rows from the normalised intervals: a base row's versions
    under the overlay valid at each point (an as-of at T joins the overlay interval valid at
    T, at most one per group, with the base intervals valid at T)."""
    rows: list[Row] = []
    for (group, topic), intervals in base.items():
        rows += _topic_rows(group, topic, intervals, overlay.get(group, []))
    return rows
