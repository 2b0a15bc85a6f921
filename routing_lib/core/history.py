"""Event-time history of the route tables: versioned intervals and broker liveness events.

Four history tables (rows are dicts, snake_case columns):

* `topic_route_history`: one row per version of topicQueueTable[topic][brokerName];
* `broker_membership_history`: one row per interval in which `broker_addr` held `broker_id`
  in brokerAddrTable[brokerName] (cluster = that entry's cluster);
* `cluster_membership_history`: one row per interval in which clusterAddrTable[cluster]
  listed `broker_name` (kept as its own table: a group's cluster set cannot be derived from
  brokerAddrTable, e.g. a second cluster name registered for the same brokerName);
* `broker_liveness_events`: REGISTERED / UNREGISTERED / EXPIRED / REJECTED / CHANNEL_CLOSED,
  i.e. every time a (cluster, addr) enters or leaves brokerLiveTable.

Time. Intervals are half-open, `[valid_from, valid_to)`, valid_to None = still current, so a
row is in State(T) iff `valid_from <= T and (valid_to is None or T < valid_to)`. An event at
t changes State(T) for every T >= t. An expiry of deadline d changes State(T) for every
T >= d + 1 (contract §3: expired iff deadline < T), whichever clock reading detected it (the
next event of the group, or a micro-batch watermark). So an expiry transition is stamped
`deadline + 1`, not its detection time: that keeps as-of exact and the rows independent of
micro-batch boundaries. Transitions stamped this way stay in the clock's order (expiries
with deadline < t come before the events at t).

Identity. An interval row is identified by its key columns + valid_from (HISTORY_IDENTITY);
a liveness event by its broker + event_time + seq. Several transitions can share one
instant (events at the same ms, an expiry at d + 1 with an event at d + 1): a version both
opened and closed at the same instant never existed in any State(T), so it is dropped
(`delete`), which keeps rows of one key non-overlapping and non-empty.

Streaming. All transitions of one instant happen in one GroupClock advance (a later event at
that instant would be late), so per-group state between micro-batches is the GroupClock plus
a small HistoryTracker (valid_from of every open interval, the liveness sequence). The
transitions are GroupClock.steps, the move GroupClock.advance makes, seen one change at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import compress, repeat
from operator import itemgetter, ne
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from routing_lib.core.catalog import ADMIN_EVENTS as ADMIN_EVENTS
from routing_lib.core.catalog import BROKER_LIVENESS_EVENTS as BROKER_LIVENESS_EVENTS
from routing_lib.core.catalog import BROKER_MEMBERSHIP_HISTORY as BROKER_MEMBERSHIP_HISTORY
from routing_lib.core.catalog import CLUSTER_MEMBERSHIP_HISTORY as CLUSTER_MEMBERSHIP_HISTORY
from routing_lib.core.catalog import HISTORY_SPECS, names, spec
from routing_lib.core.catalog import TOPIC_ROUTE_HISTORY as TOPIC_ROUTE_HISTORY
from routing_lib.core.clock import Advance, ClockStep, GroupClock
from routing_lib.core.group_routes import BrokerKey, RouteFlags
from routing_lib.core.rows import RowOp
from routing_lib.core.tables import RoutesSnapshot, Row, RowKey
from routing_lib.core.topic_table import TopicTable
from routing_lib.core.wire import Event

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

INTERVAL_TABLES = tuple(s.name for s in HISTORY_SPECS if s.close_columns)
# The interval tables, broker_liveness_events and admin_events (the audit trail and the
# DELETE_TOPIC log, appended by identity like the liveness events).
HISTORY_TABLES = names(HISTORY_SPECS)

# Interval table -> the key whose versions never overlap in time.
HISTORY_KEYS: dict[str, tuple[str, ...]] = {t: spec(t).keys for t in INTERVAL_TABLES}
# Table -> columns identifying one row: the MERGE condition (plus event_date, for pruning).
HISTORY_IDENTITY: dict[str, tuple[str, ...]] = {s.name: s.identity for s in HISTORY_SPECS}
# Interval table -> the columns a `close` sets.
HISTORY_CLOSE_COLUMNS: dict[str, tuple[str, ...]] = {
    t: spec(t).close_columns for t in INTERVAL_TABLES
}

# Transition kinds: the input event types, plus the clock's expiry.
REGISTER, HEARTBEAT, UNREGISTER, EXPIRE = "REGISTER", "HEARTBEAT", "UNREGISTER", "EXPIRE"
# A broker's last connection closed: removed as expiry removes it, at the event's time. Both
# the transition kind and the cause its history rows name (liveness event_type, end_reason).
CHANNEL_CLOSED = "CHANNEL_CLOSED"

# Liveness event types.
REGISTERED, UNREGISTERED, EXPIRED, REJECTED = "REGISTERED", "UNREGISTERED", "EXPIRED", "REJECTED"

# Change ops, as the Delta writer applies them (routing_lib/spark/delta_writer.py).
UPSERT, CLOSE, DELETE, APPEND = RowOp.UPSERT, RowOp.CLOSE, RowOp.DELETE, RowOp.APPEND


def event_date(ms: int) -> str:
    """UTC calendar day of an epoch-ms time (integer arithmetic: no float rounding)."""
    return _day_name(ms // 86_400_000)


@lru_cache(maxsize=64)
def _day_name(days_since_epoch: int) -> str:
    return (_EPOCH + timedelta(days=days_since_epoch)).date().isoformat()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ---- transitions: GroupClock.steps, one state change at a time --------------------------------


@dataclass(frozen=True)
class Transition:
    """One applied event, or the expiry of the brokers sharing one deadline."""

    kind: str  # REGISTER | HEARTBEAT | UNREGISTER | CHANNEL_CLOSED | EXPIRE | an admin kind
    time: int  # eventTime; for EXPIRE deadline + 1, the first T whose State(T) shows it
    before: RoutesSnapshot
    after: RoutesSnapshot
    # the event's (cluster, addr), an administrative event's ('', None); for EXPIRE the one
    # the cascade blames
    broker: tuple[str, str | None]
    broker_id: int | None = None  # the event's brokerId
    expired: tuple[tuple[BrokerKey, int], ...] = ()  # EXPIRE: (broker, deadline), in order
    detected_at: int | None = None  # EXPIRE: the clock reading (batch-dependent: not stored)


def iter_transitions(
    clock: GroupClock, watermark: int, flags: RouteFlags, advance: Advance
) -> Iterator[Transition]:
    """clock.steps(watermark, flags, advance) as transitions, each with the tables before and
    after it. Consume it to the end (the clock's watermark moves at the end)."""
    if watermark <= clock.watermark:
        return  # no step: spare the snapshot
    snapshot = RoutesSnapshot.of(clock.routes)
    for step in clock.steps(watermark, flags, advance):
        after = RoutesSnapshot.of(clock.routes)
        transition = _transition(step, snapshot, after)
        if transition is not None:
            yield transition
        snapshot = after


def _transition(
    step: ClockStep, before: RoutesSnapshot, after: RoutesSnapshot
) -> Transition | None:
    if step.item is None:
        return Transition(
            EXPIRE,
            step.time,
            before,
            after,
            _blamed(before, step.expired),
            expired=step.expired,
            detected_at=step.detected_at,
        )
    # An event whose application raised may have changed part of the tables: its transition
    # records what it left; one that changed nothing (say, could not be decoded) has none.
    if not step.applied and after == before:
        return None
    event = step.item.event
    return Transition(event.eventType, step.time, before, after, *_cause(event))


def _cause(event: Event) -> tuple[tuple[str, str | None], int | None]:
    """The broker an event names; an administrative event names none ("" address)."""
    return (
        (getattr(event, "clusterName", None) or "", getattr(event, "brokerAddr", None)),
        getattr(event, "brokerId", None),
    )


def _blamed(before: RoutesSnapshot, expired: Iterable[tuple[BrokerKey, int]]) -> BrokerKey:
    """Of brokers expiring together, the last one listed in brokerAddrTable: its removal is
    the one that can cascade (group removal, perm wipe)."""
    in_table = _listed(before)
    listed = [key for key, _ in expired if key in in_table]
    return (listed or [key for key, _ in expired])[-1]


def _listed(snapshot: RoutesSnapshot) -> set[BrokerKey]:
    if snapshot.broker_data is None:
        return set()
    cluster, addrs = snapshot.broker_data[0], snapshot.broker_data[1]
    return {(cluster, addr) for _, addr in addrs}


# ---- one transition -> interval ends and starts, liveness events ------------------------------


# The per-row records are NamedTuples, not frozen dataclasses: a fault of a 10 000-topic group
# makes tens of thousands of them, and a frozen dataclass's __init__ costs twice a tuple's.
class IntervalEnd(NamedTuple):
    table: str
    key: RowKey
    columns: Row  # the HISTORY_CLOSE_COLUMNS values


class IntervalStart(NamedTuple):
    table: str
    key: RowKey
    row: Row  # the whole row: valid_from = the transition's time, valid_to None


@dataclass
class TransitionHistory:
    ends: list[IntervalEnd] = field(default_factory=list)
    starts: list[IntervalStart] = field(default_factory=list)
    liveness: list[Row] = field(default_factory=list)  # without seq: the tracker numbers them


_MISSING = object()
_Key = TypeVar("_Key", bound="SupportsRichComparison")


def _changed(
    old: Mapping[_Key, object], new: Mapping[_Key, object]
) -> tuple[list[_Key], list[_Key]]:
    """Keys whose interval ends (gone or new value), keys whose interval starts."""
    if old == new:
        return [], []
    ended = sorted(k for k, v in old.items() if new.get(k, _MISSING) != v)
    started = sorted(k for k, v in new.items() if old.get(k, _MISSING) != v)
    return ended, started


def _members(name: str, s: RoutesSnapshot) -> dict[tuple[str, str, int, str], bool]:
    if s.broker_data is None:
        return {}
    cluster, addrs = s.broker_data[0], s.broker_data[1]
    return {(cluster, name, broker_id, addr): True for broker_id, addr in addrs}


def _clusters(name: str, s: RoutesSnapshot) -> dict[tuple[str, str], bool]:
    return {(cluster, name): True for cluster in s.clusters}


def _start_columns(reason_column: str, reason: str, t: Transition) -> Row:
    return {
        "valid_to": None,
        reason_column: reason,
        "start_event": t.kind,
        "start_broker_addr": t.broker[1],
        "event_date": event_date(t.time),
    }


def _end_columns(table: str, reason: str, t: Transition, addr: str | None = None) -> Row:
    values = (t.time, reason, t.kind, addr or t.broker[1])
    return dict(zip(HISTORY_CLOSE_COLUMNS[table], values, strict=True))


# Administrative events that change topic routes: the reason their history rows carry.
_ADMIN_REASONS = {
    "WIPE_WRITE_PERM": "PERM_WIPED",
    "ADD_WRITE_PERM": "PERM_ADDED",
    "DELETE_TOPIC": "TOPIC_DELETED",
}


def transition_history(name: str, t: Transition, topic_routes: bool = True) -> TransitionHistory:
    """What one transition of group `name` does to the history tables (stateless: an end
    names its key only; HistoryTracker knows which valid_from it closes).

    Reasons. topic_route_history started_by: TOPIC_ADDED, CONFIG_CHANGED, PERM_WIPED;
    ended_by: CONFIG_CHANGED, PERM_WIPED (acting-master groups losing their master),
    GROUP_REMOVED (last address of the group gone), TOPIC_DELETED
    (deleteTopicWithBrokerRegistration). broker_membership_history start_reason: REGISTERED,
    ROLE_SWITCH (the address held another id just before), TAKEOVER (the id was another
    address's); end_reason: UNREGISTERED, EXPIRED, CHANNEL_CLOSED (its last connection
    closed), ROLE_SWITCH, REPLACED (another address took the id). A removal's topic and
    cluster rows end GROUP_REMOVED / PERM_WIPED whatever removed the broker: their end_event
    (UNREGISTER, EXPIRE, CHANNEL_CLOSED) names the cause.
    cluster_membership_history: REGISTERED / GROUP_REMOVED. REMOVED is a fallback
    that the current state machine never produces. start_event / end_event name the
    transition kind, start_broker_addr / end_broker_addr the broker that caused it."""
    out = TransitionHistory()
    if topic_routes:  # off in the group layout: topic_route_history is derived (issue 36)
        _topic_routes(name, t, out)
    _broker_membership(name, t, out)
    _cluster_membership(name, t, out)
    out.liveness = _liveness(name, t)
    return out


def _topic_route_changes(old: TopicTable, new: TopicTable) -> tuple[list[str], list[str]]:
    """Topics whose interval ends, topics whose interval starts, each sorted: `_changed` on two
    topic tables, computed with set operations on the dicts' items (in C) and sorting only
    what changed. A group's removal or first registration reads names only, no rows."""
    if old is new:
        return [], []
    if not new:
        return sorted(old.names()), []
    if not old:
        return [], sorted(new.names())
    old_rows, new_rows = old.rows(), new.rows()
    if old_rows == new_rows:
        return [], []
    names = list(old_rows)
    if names == list(new_rows):
        # the same topics in the same order (a topic change that rewrote some rows): the
        # topics whose rows differ end and start, compared pairwise in C, no sets of pairs
        changed = sorted(compress(names, map(ne, old_rows.values(), new_rows.values())))
        return changed, list(changed)
    # (topic, queue) pairs of one side not in the other: the topic is gone or its row changed
    ended = sorted(topic for topic, _ in old_rows.items() - new_rows.items())
    started = sorted(topic for topic, _ in new_rows.items() - old_rows.items())
    return ended, started


def _topic_routes(name: str, t: Transition, out: TransitionHistory) -> None:
    old_topics, new_topics = t.before.topics, t.after.topics
    ended, started = _topic_route_changes(old_topics, new_topics)
    if not ended and not started:
        return
    # Why an interval ends or starts depends only on the transition and on whether the topic
    # is on the other side (after it, for an end; before it, for a start): the reasons and the
    # columns they give are computed once per transition, not once per topic.
    admin_reason = _ADMIN_REASONS.get(t.kind)
    # on both sides: only a REGISTER adds or rewrites routes; UNREGISTER and EXPIRE remove
    # them or wipe their write permission
    kept_reason = admin_reason or ("CONFIG_CHANGED" if t.kind == REGISTER else "PERM_WIPED")
    # a registration drops a topic only with deleteTopicWithBrokerRegistration
    gone_reason = admin_reason or ("TOPIC_DELETED" if t.kind == REGISTER else "GROUP_REMOVED")
    if ended:
        after_rows = new_topics.rows() if new_topics else {}
        end_columns = {
            reason: _end_columns(TOPIC_ROUTE_HISTORY, reason, t)
            for reason in {kept_reason, gone_reason}
        }
        out.ends += [
            IntervalEnd(
                TOPIC_ROUTE_HISTORY,
                (topic, name),
                end_columns[kept_reason if topic in after_rows else gone_reason],
            )
            for topic in ended
        ]
    if started:
        new_rows = new_topics.rows()
        before_rows = old_topics.rows() if old_topics else {}
        added_reason = admin_reason or "TOPIC_ADDED"
        # every column after topic_sys_flag, in the row's column order
        tails = {
            reason: {
                **_start_columns("started_by", reason, t),
                "ended_by": None,
                "end_event": None,
                "end_broker_addr": None,
            }
            for reason in {kept_reason, added_reason}
        }
        time = t.time
        for topic in started:
            q = new_rows[topic]
            row = {
                "topic": topic,
                "broker_name": name,
                "valid_from": time,
                "read_queue_nums": q.read_queue_nums,
                "write_queue_nums": q.write_queue_nums,
                "perm": q.perm,
                "topic_sys_flag": q.topic_sys_flag,
                **tails[kept_reason if topic in before_rows else added_reason],
            }
            out.starts.append(IntervalStart(TOPIC_ROUTE_HISTORY, (topic, name), row))


def _membership_end_reason(
    t: Transition, broker_id: int, addr: str, new_ids: dict[int, str]
) -> str:
    if t.kind == EXPIRE:
        return EXPIRED
    if t.kind == CHANNEL_CLOSED:  # only the closed broker's own address leaves
        return CHANNEL_CLOSED if addr == t.broker[1] else "REMOVED"
    if t.kind == UNREGISTER:
        return UNREGISTERED if addr == t.broker[1] else "REMOVED"
    if addr == t.broker[1]:
        return "ROLE_SWITCH"  # the same address registered under another id
    if new_ids.get(broker_id, addr) != addr:
        return "REPLACED"  # another address took the id
    return "REMOVED"


def _broker_membership(name: str, t: Transition, out: TransitionHistory) -> None:
    old_members, new_members = _members(name, t.before), _members(name, t.after)
    ended, started = _changed(old_members, new_members)
    new_ids = {k[2]: k[3] for k in new_members}
    old_ids_of_addr = {k[3]: k[2] for k in old_members}
    old_addr_of_id = {k[2]: k[3] for k in old_members}
    for key in ended:
        _, _, broker_id, addr = key
        reason = _membership_end_reason(t, broker_id, addr, new_ids)
        out.ends.append(
            IntervalEnd(
                BROKER_MEMBERSHIP_HISTORY,
                key,
                _end_columns(
                    BROKER_MEMBERSHIP_HISTORY, reason, t, addr if t.kind == EXPIRE else None
                ),
            )
        )
    for key in started:
        cluster, _, broker_id, addr = key
        if old_ids_of_addr.get(addr, broker_id) != broker_id:
            reason = "ROLE_SWITCH"
        elif old_addr_of_id.get(broker_id, addr) != addr:
            reason = "TAKEOVER"
        else:
            reason = REGISTERED
        row = {
            "cluster": cluster,
            "broker_name": name,
            "broker_id": broker_id,
            "broker_addr": addr,
            "valid_from": t.time,
            **_start_columns("start_reason", reason, t),
            "end_reason": None,
            "end_event": None,
            "end_broker_addr": None,
        }
        out.starts.append(IntervalStart(BROKER_MEMBERSHIP_HISTORY, key, row))


def _cluster_membership(name: str, t: Transition, out: TransitionHistory) -> None:
    ended, started = _changed(_clusters(name, t.before), _clusters(name, t.after))
    for key in ended:
        reason = "REMOVED" if t.kind == REGISTER else "GROUP_REMOVED"
        out.ends.append(
            IntervalEnd(
                CLUSTER_MEMBERSHIP_HISTORY, key, _end_columns(CLUSTER_MEMBERSHIP_HISTORY, reason, t)
            )
        )
    for key in started:
        row = {
            "cluster_name": key[0],
            "broker_name": name,
            "valid_from": t.time,
            **_start_columns("start_reason", REGISTERED, t),
            "end_reason": None,
            "end_event": None,
            "end_broker_addr": None,
        }
        out.starts.append(IntervalStart(CLUSTER_MEMBERSHIP_HISTORY, key, row))


def _history_unchanged(before: RoutesSnapshot, after: RoutesSnapshot, topics: bool) -> bool:
    """True when transition_history is certainly empty: it reads only the topics (if
    `topics`), the group's addresses, its clusters and which brokers are live (a refreshed
    timestamp is no history)."""
    return (
        (not topics or before.topics is after.topics)
        and before.live.keys() == after.live.keys()
        and before.broker_data == after.broker_data
        and before.clusters == after.clusters
    )


# The liveness event of a broker an event removed; a registration's removal is a rejection.
_LEFT_BY = {UNREGISTER: UNREGISTERED, CHANNEL_CLOSED: CHANNEL_CLOSED}


def _liveness(name: str, t: Transition) -> list[Row]:
    before, after = t.before.live, t.after.live
    if before.keys() == after.keys():
        return []
    listed_id = {
        addr: broker_id
        for broker_id, addr in (t.before.broker_data[1] if t.before.broker_data else ())
    }
    rows = []
    if t.kind == EXPIRE:
        removed = [key for key, _ in t.expired if key in before and key not in after]
        kind = EXPIRED
    else:
        removed = sorted(before.keys() - after.keys())
        kind = _LEFT_BY.get(t.kind, REJECTED)
    for key in removed:
        live = before[key]
        rows.append(
            _liveness_row(
                name,
                key,
                t.time,
                kind,
                t.broker_id if kind == REJECTED else listed_id.get(key[1]),
                live.last_update_timestamp,
                live.heartbeat_timeout_millis,
                live.deadline if kind == EXPIRED else None,
            )
        )
    for key in sorted(after.keys() - before.keys()):
        live = after[key]
        rows.append(
            _liveness_row(
                name,
                key,
                t.time,
                REGISTERED,
                t.broker_id,
                live.last_update_timestamp,
                live.heartbeat_timeout_millis,
                None,
            )
        )
    return rows


def _liveness_row(
    name: str,
    key: BrokerKey,
    time: int,
    kind: str,
    broker_id: int | None,
    last_update: int,
    timeout: int,
    deadline: int | None,
) -> Row:
    return {
        "broker_name": name,
        "cluster_name": key[0],
        "broker_addr": key[1],
        "event_time": time,
        "event_type": kind,
        "broker_id": broker_id,
        "last_update_timestamp": last_update,
        "heartbeat_timeout_millis": timeout,
        "deadline": deadline,
        "event_date": event_date(time),
    }


# ---- per-group state between micro-batches ----------------------------------------------------


class HistoryChange(NamedTuple):
    """One row operation for the Delta writer. `row` always holds the identity columns and
    event_date; `upsert`/`append`: the whole row; `close`: + HISTORY_CLOSE_COLUMNS."""

    table: str
    op: RowOp  # UPSERT | CLOSE | DELETE | APPEND
    row: Row

    @property
    def identity(self) -> RowKey:
        return _IDENTITY_OF[self.table](self.row)


def _identity_getter(columns: tuple[str, ...]) -> Callable[[Row], RowKey]:
    if len(columns) == 1:  # itemgetter of one column gives the value, not a tuple
        return lambda row: (row[columns[0]],)
    return itemgetter(*columns)  # in C: compacting a fault's 20 000 changes reads 60 000 cells


_IDENTITY_OF = {table: _identity_getter(columns) for table, columns in HISTORY_IDENTITY.items()}


def _identity_row(table: str, key: RowKey, valid_from: int) -> Row:
    row = dict(zip(HISTORY_KEYS[table], key, strict=True))
    row["valid_from"] = valid_from
    row["event_date"] = event_date(valid_from)
    return row


HISTORY_STATE_FORMAT = 2
HistoryState = tuple[str, str]  # (tracker JSON, topic_route_history opens blob)


@dataclass
class HistoryTracker:
    """One group's history bookkeeping: when each open interval started, and the liveness
    sequence of the current instant. Lives in the group's state next to its GroupClock."""

    broker_name: str
    open_since: dict[str, dict[RowKey, int]] = field(
        default_factory=lambda: {t: {} for t in INTERVAL_TABLES}
    )
    instant: int = 0  # time of the latest liveness event
    seq: int = 0  # liveness events already numbered at `instant`
    # topic_route_history's open intervals as read from state, until first used: a group with
    # 10 000 topics keeps them all open, and most batches change none of them.
    topic_opens_blob: str | None = None
    # Keep topic_route_history's intervals (False in the group layout, issue 36: that table is
    # derived from the group-level facts, and a fault must cost no loop per topic). Not saved:
    # the step sets it from its config.
    topic_routes: bool = True

    def without_topic_routes(self) -> HistoryTracker:
        """Stop keeping topic_route_history's intervals, and forget the open ones (a state
        saved by the per-topic layout holds them; nothing closes them any more)."""
        self.topic_routes = False
        self.topic_opens_blob = None
        self.open_since[TOPIC_ROUTE_HISTORY] = {}
        return self

    def opens(self, table: str) -> dict[RowKey, int]:
        if table == TOPIC_ROUTE_HISTORY and self.topic_opens_blob is not None:
            pairs = json.loads(self.topic_opens_blob) if self.topic_opens_blob else []
            # {(topic, broker name): since}, built in C (a group's 10 000 open intervals)
            keys = zip(map(itemgetter(0), pairs), repeat(self.broker_name))
            self.open_since[table] = dict(zip(keys, map(itemgetter(1), pairs), strict=True))
            self.topic_opens_blob = None
        return self.open_since[table]

    def record(self, transition: Transition) -> list[HistoryChange]:
        if _history_unchanged(transition.before, transition.after, self.topic_routes):
            return []  # most transitions: a heartbeat or an unchanged registration
        h = transition_history(self.broker_name, transition, self.topic_routes)
        t = transition.time
        out: list[HistoryChange] = []
        opens: dict[RowKey, int] = {}
        table = None
        for end in h.ends:
            if end.table != table:  # ends come grouped by table
                table, opens = end.table, self.opens(end.table)
            since = opens.pop(end.key, None)
            if since is None:
                continue  # opened before this group's history was tracked: nothing to close
            ident = _identity_row(end.table, end.key, since)
            if since == t:  # opened and closed at one instant: no State(T) ever showed it
                out.append(HistoryChange(end.table, DELETE, ident))
            else:
                out.append(HistoryChange(end.table, CLOSE, {**ident, **end.columns}))
        table = None
        for start in h.starts:
            if start.table != table:
                table, opens = start.table, self.opens(start.table)
            opens[start.key] = t
            out.append(HistoryChange(start.table, UPSERT, start.row))
        for row in h.liveness:
            if t != self.instant:
                self.instant, self.seq = t, 0
            out.append(HistoryChange(BROKER_LIVENESS_EVENTS, APPEND, {**row, "seq": self.seq}))
            self.seq += 1
        return out

    def advance(
        self,
        clock: GroupClock,
        watermark: int,
        flags: RouteFlags,
        observe: Callable[[Transition], None] | None = None,
    ) -> tuple[Advance, list[HistoryChange]]:
        """clock.advance(watermark, flags), plus the history changes of what it did
        (compacted: at most one change per row identity, ready for one MERGE). `observe`
        sees every transition too (the step's group-level facts: core/group_facts.py)."""
        advance = Advance()
        changes: list[HistoryChange] = []
        for transition in iter_transitions(clock, watermark, flags, advance):
            changes += self.record(transition)
            if observe is not None:
                observe(transition)
        return advance, compact_changes(changes)

    def is_idle(self) -> bool:
        return not self.topic_opens_blob and not any(self.open_since.values())


def encode_history(tracker: HistoryTracker) -> HistoryState:
    topic_blob = tracker.topic_opens_blob
    if topic_blob is None:
        opens = tracker.open_since[TOPIC_ROUTE_HISTORY]
        # [[topic, since], ...]: JSON writes the (topic, since) tuples as arrays
        pairs = list(zip(map(itemgetter(0), opens), opens.values(), strict=True))
        topic_blob = json.dumps(pairs, separators=(",", ":")) if opens else ""
    return json.dumps(
        {
            "v": HISTORY_STATE_FORMAT,
            "name": tracker.broker_name,
            "open": {
                table: [[*key, since] for key, since in opens.items()]
                for table, opens in tracker.open_since.items()
                if table != TOPIC_ROUTE_HISTORY
            },
            "instant": [tracker.instant, tracker.seq],
        },
        separators=(",", ":"),
    ), topic_blob


def decode_history(state: HistoryState) -> HistoryTracker:
    text, topic_blob = state
    s = json.loads(text)
    if s.get("v") != HISTORY_STATE_FORMAT:
        raise ValueError(f"unknown history state format {s.get('v')!r}")
    open_since: dict[str, dict[RowKey, int]] = {t: {} for t in INTERVAL_TABLES}
    for table, items in s["open"].items():
        open_since[table] = {tuple(item[:-1]): item[-1] for item in items}
    instant, seq = s["instant"]
    return HistoryTracker(s["name"], open_since, instant, seq, topic_opens_blob=topic_blob)


# ---- the writer's side: one change per row ------------------------------------------------------


def compact_changes(changes: Iterable[HistoryChange]) -> list[HistoryChange]:
    """Fold a batch's changes to one per row identity (a Delta MERGE refuses two source rows
    for one target row): upsert+close -> the closed row; otherwise the later change wins
    (upsert+delete -> delete, delete+upsert -> upsert)."""
    changes = list(changes)
    identity_of = _IDENTITY_OF
    slots = [(change.table, identity_of[change.table](change.row)) for change in changes]
    if len(set(slots)) == len(slots):  # one change per row already (a fault's 20 000 rows)
        return changes
    folded: dict[tuple[str, RowKey], HistoryChange] = {}
    for slot, change in zip(slots, changes, strict=True):
        previous = folded.get(slot)
        if previous is not None and previous.op == UPSERT and change.op == CLOSE:
            change = HistoryChange(change.table, UPSERT, {**previous.row, **change.row})
        folded[slot] = change
    return list(folded.values())
