"""A group's topics as base + overlay (routing_lib/core/overlay.py, issue 36).

The reference is the state machine as it was before: every fault applied to the topic rows
themselves (`GroupRoutes.group_level = False`: an expiry empties the table, a perm change maps
every row). The group-level state must give the same effective slice after every event of
drawn and seeded histories (faults, partitions, renames, split and re-sent registrations,
administrative events), with topic tables as content references (the by-reference fast
paths) and inline; and a fault of a 10 000-topic group must change only the overlay.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from itertools import product

from hypothesis import event, given

from routing_lib.core.admin import group_key
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes, RouteFlags, apply_event
from routing_lib.core.overlay import (
    ABSENT,
    GroupTopics,
    Overlay,
    PermOp,
    compose,
    effective_rows,
)
from routing_lib.core.topic_table import QueueData, TopicTable
from routing_lib.core.wire import Event, externalize, pack_event, unpack_event
from schemas import DeleteTopicEvent, TickEvent, parse_event
from tests.support.event_strategies import History, histories, profile
from tests.support.helpers import random_history, registration_modes


class MaterialisedRoutes(GroupRoutes):
    """The reference: faults change the rows themselves, as before issue 36."""

    group_level = False


# ---- the algebra --------------------------------------------------------------------------


def test_any_two_perm_ops_compose_to_one_of_the_four_over_every_perm() -> None:
    for outer, inner in product(PermOp, repeat=2):
        composed = compose(outer, inner)
        assert composed in PermOp
        for perm in range(8):
            assert composed.apply(perm) == outer.apply(inner.apply(perm)), (outer, inner, perm)
        assert inner.then(outer) is composed


def test_each_op_is_the_java_perm_change() -> None:
    assert [PermOp.WIPE.apply(p) for p in range(8)] == [p & ~2 for p in range(8)]
    assert {PermOp.RW.apply(p) for p in range(8)} == {6}
    assert {PermOp.R.apply(p) for p in range(8)} == {4}
    assert [PermOp.ID.apply(p) for p in range(8)] == list(range(8))
    # the ops are distinct maps: no two agree on every perm
    maps = {tuple(op.apply(p) for p in range(8)) for op in PermOp}
    assert len(maps) == 4


def test_effective_slice_is_perm_op_of_base_within_covered_when_present() -> None:
    base = TopicTable(
        {"a": QueueData(8, 8, 6, 0), "b": QueueData(4, 4, 7, 1), "c": QueueData(1, 1, 2, 0)}
    )
    assert effective_rows(base, ABSENT) == {}
    assert effective_rows(base, Overlay()) == dict(base.rows())
    wiped_b = effective_rows(base, Overlay(True, PermOp.WIPE, frozenset({"b", "zz"})))
    assert wiped_b == {"b": QueueData(4, 4, 5, 1)}
    state = GroupTopics(base)
    assert state.effective() is base  # a trivial overlay is the base itself
    assert state.removed().effective() == {} and state.removed().base is base
    assert state.perm_changed(PermOp.RW).perm_changed(PermOp.WIPE).overlay.perm_op is PermOp.R


# ---- the group-level state against the materialised reference, event by event ---------------


def _with_refs(events: list[Event]) -> list[Event]:
    """Registrations whose topic table is a content reference (this process's memory)."""
    return [unpack_event(externalize(pack_event(e), None, 0)) for e in events]


def _ordered(events: list[Event | TickEvent]) -> list[Event]:
    keyed = sorted(
        ((e.eventTime, i, e) for i, e in enumerate(events) if not isinstance(e, TickEvent)),
        key=lambda item: item[:2],
    )
    return [e for _, _, e in keyed]


def _step_both(events: list[Event], flags: RouteFlags) -> Iterator[dict[str, GroupRoutes]]:
    """Apply the events in order to both kinds of routes (expiring before each, as the
    replay does), checking after each event that every group's slice is the same; yields the
    group-level groups after each event."""
    level: dict[str, GroupRoutes] = {}
    reference: dict[str, GroupRoutes] = {}
    for e in events:
        for groups, kind in ((level, GroupRoutes), (reference, MaterialisedRoutes)):
            for routes in groups.values():
                routes.expire(e.eventTime)
            keys = list(groups) if isinstance(e, DeleteTopicEvent) else [group_key(e)]
            for key in keys:
                apply_event(groups.setdefault(key, kind(key)), e, flags)
        for key, routes in level.items():
            want = reference[key].topics
            assert routes.topics == want, (key, e.eventType, e.eventTime)
            assert list(routes.topics.names()) == list(want.names()) or set(
                routes.topics.names()
            ) == set(want.names())
            assert routes.is_empty() <= reference[key].is_empty()
        yield level


def _overlay_kinds(level: dict[str, GroupRoutes]) -> set[str]:
    kinds = set()
    for routes in level.values():
        overlay = routes.topic_state.overlay
        if not overlay.present and routes.topic_state.base:
            kinds.add("absent with a base")
        if overlay.perm_op is not PermOp.ID:
            kinds.add(f"perm op {overlay.perm_op.value}")
        if overlay.covered is not None:
            kinds.add("covered")
    return kinds


@profile()
@given(histories())
def test_drawn_histories_give_the_materialised_slice_after_every_event(history: History) -> None:
    events = [parse_event(json.dumps(record)) for record in history.records]
    ordered = _ordered(events)
    if history.content_refs:
        ordered = _with_refs(ordered)
    seen: set[str] = set()
    for level in _step_both(ordered, history.flags):
        seen |= _overlay_kinds(level)
    for kind in sorted(seen):
        event(f"overlay reached: {kind}")


def _seeded_history(seed: int) -> list[Event]:
    from routelake_dev.simulator import with_admin_events

    rng = random.Random(seed)
    records = registration_modes(random_history(seed, rng), rng)
    records = with_admin_events(records, seed, every=rng.randint(4, 12))
    return [parse_event(json.dumps(r)) for r in records]


def test_seeded_fleet_histories_give_the_materialised_slice_after_every_event() -> None:
    """Faults, role switches, split and re-sent registrations, admin events; by reference
    and inline; both flags. Every overlay form is reached over the seeds."""
    seen: set[str] = set()
    for seed in range(8):
        ordered = _ordered(_seeded_history(seed))
        for flags in (DEFAULT_FLAGS, RouteFlags(delete_topic_with_broker_registration=True)):
            for events in (ordered, _with_refs(ordered)):
                for level in _step_both(events, flags):
                    seen |= _overlay_kinds(level)
    assert {"absent with a base", "perm op WIPE", "covered"} <= seen, seen


def test_a_partition_of_half_the_fleet_returns_by_overlay_only() -> None:
    """Half the groups silent past their timeout, then back with the tables they left with
    (by reference): each leaves and returns by its overlay, its base the same object."""
    from tests.support.helpers import register_record

    records = []
    for g in range(6):
        record = register_record(1_000, "C", f"10.0.0.{g}", f"broker-{g}", "T")
        record["topicConfigTable"] = {
            f"T{i}": {"topicName": f"T{i}", "perm": 6, "readQueueNums": 4, "writeQueueNums": 4}
            for i in range(50)
        }
        records.append(record)
    beats = [{**r, "eventTime": t} for t in range(31_000, 300_000, 30_000) for r in records[:3]]
    back = [{**r, "eventTime": 300_000} for r in records[3:]]
    events = _with_refs(_ordered([parse_event(json.dumps(r)) for r in [*records, *beats, *back]]))
    bases: dict[str, TopicTable] = {}
    absent_seen = set()
    for level in _step_both(events, DEFAULT_FLAGS):
        for key, routes in level.items():
            bases.setdefault(key, routes.topic_state.base)
            assert routes.topic_state.base is bases[key] or routes.topic_state.base == bases[key]
            if not routes.topic_state.overlay.present:
                absent_seen.add(key)
    assert absent_seen == {"broker-3", "broker-4", "broker-5"}
    assert all(routes.topic_state.overlay.present for routes in level.values())


# ---- a fault of a 10 000-topic group touches the overlay only ------------------------------------


def _big_register(
    at: int, addr: str, broker_id: int, acting: bool | None = None, **topic_fields: object
) -> Event:
    record = {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C",
        "brokerAddr": addr,
        "brokerName": "big",
        "brokerId": broker_id,
        "dataVersion": {"stateVersion": 0, "timestamp": 1, "counter": 1},
        "topicConfigTable": {
            f"topic-{i:05d}": {"topicName": f"topic-{i:05d}", "perm": 6, **topic_fields}
            for i in range(10_000)
        },
    }
    if acting is not None:
        record["enableActingMaster"] = acting
    return _with_refs([parse_event(json.dumps(record))])[0]


def test_faults_of_a_10000_topic_group_change_the_overlay_only() -> None:
    routes = GroupRoutes("big")
    master, slave = "10.0.0.1:10911", "10.0.0.2:10911"
    routes.register(_big_register(1, master, 0, acting=True), 1, DEFAULT_FLAGS)  # type: ignore[arg-type]
    routes.register(_big_register(2, slave, 1, acting=True), 2, DEFAULT_FLAGS)  # type: ignore[arg-type]
    base = routes.topic_state.base
    assert len(base) == 10_000 and routes.topic_state.overlay.is_trivial()
    decodes = TopicTable.decodes

    def check(op: PermOp, present: bool = True) -> None:
        assert routes.topic_state.base is base
        assert routes.topic_state.overlay == Overlay(present, op, None)
        assert TopicTable.decodes == decodes  # no row of the base was read

    routes.unregister("C", master)  # the acting master's group loses its master: wipe
    check(PermOp.WIPE)
    routes.write_perm(wipe=False)  # admin ADD_WRITE_PERM
    check(PermOp.RW)
    routes.write_perm(wipe=True)  # admin WIPE_WRITE_PERM
    check(PermOp.R)
    routes.register(_big_register(3, master, 0, acting=True), 3, DEFAULT_FLAGS)  # type: ignore[arg-type]
    check(PermOp.ID)  # the master is back: every config set again
    routes.unregister("C", master)
    routes.unregister("C", slave)  # the group's last address: it leaves
    check(PermOp.ID, present=False)
    assert not routes.topics
    routes.register(_big_register(4, master, 0), 4, DEFAULT_FLAGS)  # type: ignore[arg-type]
    check(PermOp.ID)  # the return with the table it left with
    assert routes.topics is base
    # expiry is the same removal
    routes.expire(4 + 120_001)
    check(PermOp.ID, present=False)


def test_a_prime_slaves_wiped_table_is_the_unwiped_base_under_wipe() -> None:
    """An acting master's prime slave sets its whole table without the write bit. Stored as
    its table + WIPE, the master's registration of the same rows after it (the cold start,
    a return where the slave comes first) changes the overlay only, and the slave's return
    with the rows the group left with writes no base: found in the partition run, where such
    returns were 9 500-topic base changes twice over. The slave's table here differs from
    the master's in a field that is no part of a route (`order`): another content
    reference, the same rows, so the shortcut by reference cannot decide it."""
    routes = GroupRoutes("big")
    master, slave = "10.0.0.1:10911", "10.0.0.2:10911"
    routes.register(_big_register(1, slave, 1, acting=True, order=True), 1, DEFAULT_FLAGS)  # type: ignore[arg-type]
    base = routes.topic_state.base
    assert routes.topic_state.overlay == Overlay(True, PermOp.WIPE, None)
    assert {q.perm for q in base.values()} == {6} and len(base) == 10_000
    assert {q.perm for q in routes.topics.values()} == {4}
    routes.register(_big_register(2, master, 0, acting=True), 2, DEFAULT_FLAGS)  # type: ignore[arg-type]
    assert routes.topic_state.base is base and routes.topic_state.overlay.is_trivial()
    routes.unregister("C", master)
    routes.unregister("C", slave)
    assert routes.topic_state.base is base and not routes.topic_state.overlay.present
    routes.register(_big_register(3, slave, 1, acting=True, order=True), 3, DEFAULT_FLAGS)  # type: ignore[arg-type]
    assert routes.topic_state.base is base
    assert routes.topic_state.overlay == Overlay(True, PermOp.WIPE, None)


# ---- the state encoding -------------------------------------------------------------------


def test_a_trivial_overlay_saves_the_state_as_before_and_others_round_trip() -> None:
    from routing_lib.core.clock import GroupClock
    from routing_lib.core.codec import decode_clock, encode_clock

    routes = GroupRoutes("big")
    routes.register(_big_register(1, "10.0.0.1:10911", 0), 1, DEFAULT_FLAGS)  # type: ignore[arg-type]
    text, blob = encode_clock(GroupClock(routes))
    assert json.loads(text)["v"] == 2 and "overlay" not in json.loads(text)  # as before
    assert blob == routes.topics.blob()
    for change in (
        lambda r: r.write_perm(wipe=True),
        lambda r: r.unregister("C", "10.0.0.1:10911"),
    ):
        change(routes)
        text, blob = encode_clock(GroupClock(routes))
        assert json.loads(text)["v"] == 3
        assert blob == routes.topic_state.base.blob()  # the base, not the slice
        back = decode_clock((text, blob)).routes
        assert back.topic_state == routes.topic_state
        assert back.topics == routes.topics
    covered = GroupRoutes("c", topic_state=GroupTopics(TopicTable({"a": QueueData(1, 1, 6, 0)})))
    covered.topic_state = GroupTopics(
        covered.topic_state.base, Overlay(True, PermOp.R, frozenset("a"))
    )
    back = decode_clock(encode_clock(GroupClock(covered))).routes
    assert back.topic_state == covered.topic_state
    assert back.topics == {"a": QueueData(1, 1, 4, 0)}
