"""History tables and as-of reconstruction, against the reference replay: the core's history
changes, committed by the job's Delta writer (delta-rs, no Spark) and read back by the shipped
reader."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import chain
from pathlib import Path

import pytest
from deltalake import DeltaTable

from routelake_dev.simulator import encode_event, generate_history
from routing_lib.core.admin import group_key
from routing_lib.core.as_of import as_of, as_of_view
from routing_lib.core.catalog import HISTORY_SPECS, spec
from routing_lib.core.clock import Advance, GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.group_routes import Event, GroupRoutes, RouteFlags
from routing_lib.core.history import (
    BROKER_LIVENESS_EVENTS,
    BROKER_MEMBERSHIP_HISTORY,
    CHANNEL_CLOSED,
    CLUSTER_MEMBERSHIP_HISTORY,
    HISTORY_IDENTITY,
    HISTORY_KEYS,
    HISTORY_TABLES,
    INTERVAL_TABLES,
    REGISTERED,
    TOPIC_ROUTE_HISTORY,
    UPSERT,
    HistoryChange,
    HistoryTracker,
    compact_changes,
    decode_history,
    encode_history,
    event_date,
    iter_transitions,
)
from routing_lib.core.replay import default_watermark, replay_dumps
from routing_lib.core.rows import RowOp
from routing_lib.core.tables import RoutesSnapshot, Row, RowKey
from schemas import DeleteTopicEvent, TickEvent, parse_event
from tests.support.helpers import DELAY_MS, FIXTURES, fixture_lines, seeds
from tests.support.writer_support import WriterWarehouse

FLAGS = RouteFlags()
T0 = 1_764_000_000_000
Rows = dict[str, list[Row]]


# ---- driving the clocks ---------------------------------------------------------------------


@dataclass
class HistoryRun:
    """What the groups' steps hand the writer, batch by batch (each batch's history changes,
    one per row), and the final watermark."""

    batches: list[list[HistoryChange]]
    watermark: int

    def net(self) -> dict[tuple[str, RowKey], tuple[RowOp, Row]]:
        """Every batch folded by the step's own compaction: what the run does to each row,
        whatever its batch boundaries. Equal nets mean equal tables: the writer's MERGEs of
        the batches in turn leave the table one MERGE of the net would
        (test_micro_batches_through_the_writer_equal_one_batch)."""
        folded = compact_changes(chain.from_iterable(self.batches))
        return {(c.table, c.identity): (c.op, c.row) for c in folded}

    def changes(self) -> Iterator[HistoryChange]:
        return chain.from_iterable(self.batches)


def commit(warehouse: WriterWarehouse, run: HistoryRun) -> None:
    """The run's batches through the job's Delta writer: one MERGE per table and batch, as
    the job commits them (txn = batch id)."""
    for batch_id, batch in enumerate(run.batches):
        by_table: dict[str, list[tuple[str, Row]]] = defaultdict(list)
        for change in batch:
            by_table[change.table].append((str(change.op), change.row))
        for table, changes in by_table.items():
            warehouse.merge(table, changes, batch_id)


def read_rows(root: Path) -> Rows:
    """The history tables as the writer left them, rows sorted by identity. Read whole with
    delta-rs: topic_route_history here is HistoryTracker's per-topic table, the reference the
    group layout's derived one is held equal to (tests/test_route_history_read.py); the job
    no longer stores it, and the shipped reader derives it from the change tables."""
    rows = {t: DeltaTable(str(root / t)).to_pyarrow_table().to_pylist() for t in HISTORY_TABLES}
    return {
        t: sorted(rows[t], key=lambda r, t=t: tuple(r[c] for c in HISTORY_IDENTITY[t]))
        for t in HISTORY_TABLES
    }


def written(run: HistoryRun, root: Path) -> Rows:
    commit(WriterWarehouse(root, HISTORY_SPECS), run)
    return read_rows(root)


def run_history(
    events: list[Event],
    rng: random.Random | None = None,
    round_trip: bool = False,
    flags: RouteFlags = FLAGS,
    final: int | None = None,
    max_batch: int = 40,
) -> HistoryRun:
    """Events in arrival order through per-group GroupClock + HistoryTracker, like the Spark
    step: random micro-batches of up to `max_batch` events when `rng` is given (else one),
    each batch's per-group changes one batch of the writer. Checks the history driver against
    plain GroupClock.advance on the way."""
    groups: dict[str, tuple[GroupClock, HistoryTracker]] = {}
    shadows: dict[str, GroupClock] = {}
    batches: list[list[HistoryChange]] = []

    def move(watermark: int) -> None:
        batch: list[HistoryChange] = []
        for name, (clock, tracker) in list(groups.items()):
            advance, changes = tracker.advance(clock, watermark, flags)
            expected = shadows[name].advance(watermark, flags)
            assert advance == expected
            assert RoutesSnapshot.of(clock.routes) == RoutesSnapshot.of(shadows[name].routes)
            assert clock.watermark == shadows[name].watermark
            # the step drops a group's state once its clock is idle: nothing may stay open
            assert tracker.is_idle() or not clock.is_idle()
            batch += changes
            if round_trip:
                groups[name] = (
                    decode_clock(encode_clock(clock)),
                    decode_history(encode_history(tracker)),
                )
        # the writer's MERGE refuses two changes of one row in a batch
        assert len({(c.table, c.identity) for c in batch}) == len(batch)
        batches.append(batch)

    every_group = sorted(
        {
            group_key(e)
            for e in events
            if not isinstance(e, TickEvent) and not isinstance(e, DeleteTopicEvent)
        }
    )
    max_seen = published = i = 0
    while i < len(events):
        size = rng.randint(1, max_batch) if rng else len(events)
        chunk = events[i : i + size]
        watermark = max(max_seen - DELAY_MS, 0)  # Spark's watermark lags one batch
        for position, event in enumerate(chunk, start=i):
            if isinstance(event, TickEvent):  # moves the watermark (max_seen) only
                continue
            # Every group moves every batch here, so a DELETE_TOPIC can simply go to every
            # group of the history (created up front); the job's fan-out is in stream_model.
            names = every_group if isinstance(event, DeleteTopicEvent) else [group_key(event)]
            for name in names:
                if name not in groups:
                    groups[name] = (GroupClock(GroupRoutes(name)), HistoryTracker(name))
                    shadows[name] = GroupClock(GroupRoutes(name))
                clock = groups[name][0]
                assert not clock.is_late(event.eventTime, published)
                clock.add(event, ("file", position))
                shadows[name].add(event, ("file", position))
        if rng:
            move(watermark)
        i += len(chunk)
        max_seen = max([max_seen] + [e.eventTime for e in chunk])
        published = watermark
    watermark = default_watermark(events, DELAY_MS) if final is None else final
    move(watermark)
    return HistoryRun(batches, watermark)


def probe_times(
    events: list[Event], rows: Rows, watermark: int, rng: random.Random, limit: int
) -> list[int]:
    """Event times, expiry deadlines and interval bounds, +-1 ms, and some random times."""
    marks = {e.eventTime for e in events}
    marks |= {e.eventTime + (getattr(e, "heartbeatTimeoutMillis", None) or 120_000) for e in events}
    for table_rows in rows.values():
        for r in table_rows:
            marks |= {r.get(c) for c in ("valid_from", "valid_to", "event_time", "deadline")}
    marks.discard(None)
    start = min(e.eventTime for e in events)
    near = sorted({m + d for m in marks for d in (-1, 0, 1) if start - 1 <= m + d <= watermark})
    picked = near if len(near) <= limit else rng.sample(near, limit)
    return sorted(
        set(picked)
        | {start - 1, watermark}
        | {rng.randint(start - 1, watermark) for _ in range(10)}
    )


def assert_as_of_exact(
    events: list[Event],
    rows: Rows,
    watermark: int,
    seed: int,
    limit: int,
    flags: RouteFlags = FLAGS,
) -> None:
    times = probe_times(events, rows, watermark, random.Random(seed), limit)
    for t, dump in replay_dumps(events, times, flags):
        assert as_of(rows, t) == as_of_view(dump), f"as of {t}"


def assert_well_formed(rows: Rows) -> None:
    """Versions of one key never overlap and are never empty; liveness alternates."""
    for table in INTERVAL_TABLES:
        by_key: dict[tuple, list[Row]] = defaultdict(list)
        for r in rows[table]:
            by_key[tuple(r[c] for c in HISTORY_KEYS[table])].append(r)
            if table == BROKER_MEMBERSHIP_HISTORY:  # one address per id at any time, too
                by_key[("id", r["broker_name"], r["broker_id"])].append(r)
        for key, versions in by_key.items():
            versions.sort(key=lambda r: r["valid_from"])
            for previous, current in zip(versions, versions[1:], strict=False):
                assert previous["valid_to"] is not None, (table, key)
                assert previous["valid_to"] <= current["valid_from"], (table, key)
            for r in versions:
                assert r["valid_to"] is None or r["valid_from"] < r["valid_to"], (table, key)
                assert r["event_date"] == event_date(r["valid_from"])
    identities = {
        tuple(r[c] for c in HISTORY_IDENTITY[BROKER_LIVENESS_EVENTS])
        for r in rows[BROKER_LIVENESS_EVENTS]
    }
    assert len(identities) == len(rows[BROKER_LIVENESS_EVENTS])
    by_broker: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows[BROKER_LIVENESS_EVENTS]:
        by_broker[(r["broker_name"], r["cluster_name"], r["broker_addr"])].append(r)
    for broker, events in by_broker.items():
        events.sort(key=lambda r: (r["event_time"], r["seq"]))
        kinds = [r["event_type"] == REGISTERED for r in events]
        assert kinds == [i % 2 == 0 for i in range(len(kinds))], broker


def assert_columns_match_ddl(run: HistoryRun) -> None:
    """Opened rows and events carry every column of their table, closes their close columns."""
    for change in run.changes():
        table = spec(change.table)
        if change.op == RowOp.CLOSE:
            expected = {*table.identity, *table.partition_by, *table.close_columns}
        elif change.op == RowOp.DELETE:
            expected = {*table.identity, *table.partition_by}
        else:
            expected = set(table.column_names)
        assert set(change.row) == expected, change


def events_of(lines: list[str]) -> list[Event]:
    return [parse_event(line) for line in lines]


# ---- golden fixtures and simulated fleets ---------------------------------------------------


@cache
def one_shot(name: str) -> HistoryRun:
    return run_history(events_of(fixture_lines(name)))


@pytest.mark.parametrize("name", FIXTURES)
def test_as_of_equals_reference_state_on_golden(name, tmp_path):
    run = one_shot(name)
    rows = written(run, tmp_path)
    assert_well_formed(rows)
    assert_columns_match_ddl(run)
    assert_as_of_exact(events_of(fixture_lines(name)), rows, run.watermark, seed=7, limit=60)


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("seed", seeds([3, 1, 2]))  # 3: no state round trips
def test_history_does_not_depend_on_micro_batches(name, seed):
    run = run_history(events_of(fixture_lines(name)), random.Random(seed), round_trip=seed != 3)
    assert run.net() == one_shot(name).net()


SIM_SEEDS = [3, 17, 29, 41]
# seed -> collectors publishing the fleet (0: no connections, an archive's; 1, 2: connections,
# their closes and collector restarts, routelake_dev/simulator/channels.py)
SIM_COLLECTORS = {3: 0, 17: 0, 29: 1, 41: 2}


@cache
def simulated(seed: int) -> list[Event]:
    history = generate_history(
        seed,
        brokers=5,
        topics=6,
        duration_ms=40 * 60_000,
        disorder_ms=3000,
        fault_interval_ms=120_000,
        collectors=SIM_COLLECTORS[seed],
    )
    return [parse_event(encode_event(e)) for e in history]


@pytest.mark.parametrize("seed", SIM_SEEDS)
def test_as_of_equals_reference_state_on_simulated_fleets(seed, tmp_path):
    events = simulated(seed)
    run = run_history(events)
    rows = written(run, tmp_path)
    assert_well_formed(rows)
    assert rows[BROKER_LIVENESS_EVENTS] and rows[TOPIC_ROUTE_HISTORY]
    if SIM_COLLECTORS[seed]:  # some broker left by its last connection's close
        assert any(r["event_type"] == CHANNEL_CLOSED for r in rows[BROKER_LIVENESS_EVENTS])
    assert_as_of_exact(events, rows, run.watermark, seed=seed, limit=50)
    assert run_history(events, random.Random(seed), round_trip=True).net() == run.net()


@pytest.mark.parametrize(("history", "max_batch"), [("08_role_switch", 1), ("simulated", 200)])
def test_micro_batches_through_the_writer_equal_one_batch(history, max_batch, tmp_path):
    """The writer's MERGEs of a run's batches, one after the other, leave the tables that one
    batch of the whole history leaves: intervals opened in one batch and closed in a later one,
    liveness events, expiries, state round trips between batches."""
    events = (
        simulated(SIM_SEEDS[0]) if history == "simulated" else events_of(fixture_lines(history))
    )
    batched = run_history(events, random.Random(11), round_trip=True, max_batch=max_batch)
    one = run_history(events)
    assert len(batched.batches) >= 6 and batched.net() == one.net()
    assert written(batched, tmp_path / "batched") == written(one, tmp_path / "one")


# ---- hand-made cases: same instant, expiry stamping, ties, rejection, deletion ----------------


def reg(
    t: int,
    addr: str = "10.0.0.1:10911",
    broker_id: int = 0,
    topics: dict | None = None,
    counter: int = 1,
    state_version: int = 0,
    timeout: int | None = None,
    name: str = "broker-a",
    cluster: str = "C1",
) -> Event:
    body = {
        "eventType": "REGISTER",
        "eventTime": t,
        "clusterName": cluster,
        "brokerAddr": addr,
        "brokerName": name,
        "brokerId": broker_id,
        "dataVersion": {"stateVersion": state_version, "timestamp": 1, "counter": counter},
        "topicConfigTable": {
            n: {"topicName": n, "perm": p}
            for n, p in (topics if topics is not None else {"T": 6}).items()
        },
    }
    if timeout:
        body["heartbeatTimeoutMillis"] = timeout
    return parse_event(json.dumps(body))


def unreg(t: int, addr: str = "10.0.0.1:10911", broker_id: int = 0) -> Event:
    return parse_event(
        json.dumps(
            {
                "eventType": "UNREGISTER",
                "eventTime": t,
                "clusterName": "C1",
                "brokerAddr": addr,
                "brokerName": "broker-a",
                "brokerId": broker_id,
            }
        )
    )


def run_exact(root: Path, events: list[Event], until: int, flags: RouteFlags = FLAGS) -> Rows:
    """History up to `until` as the writer leaves it, checked: well formed, as-of exact at
    every ms of interest, and the same in one batch and in random micro-batches."""
    run = run_history(events, final=until, flags=flags)
    rows = written(run, root)
    assert_well_formed(rows)
    assert_as_of_exact(events, rows, until, seed=1, limit=10_000, flags=flags)
    assert run_history(events, random.Random(5), final=until, flags=flags).net() == run.net()
    return rows


def topic_versions(rows: Rows, topic: str = "T") -> list[tuple]:
    return [
        (
            r["valid_from"] - T0,
            None if r["valid_to"] is None else r["valid_to"] - T0,
            r["perm"],
            r["started_by"],
            r["ended_by"],
        )
        for r in sorted(rows[TOPIC_ROUTE_HISTORY], key=lambda r: r["valid_from"])
        if r["topic"] == topic
    ]


def test_versions_within_one_instant_are_dropped(tmp_path):
    events = [
        reg(T0, topics={"T": 6}),
        reg(T0 + 5, topics={"T": 4}, counter=2),
        reg(T0 + 5, topics={"T": 2}, counter=3),  # same ms: perm 4 never showed
        reg(T0 + 9, topics={"T": 4}, counter=4),
        reg(T0 + 9, topics={"T": 2}, counter=5),
    ]  # back to the value it had
    rows = run_exact(tmp_path, events, T0 + 20)
    assert topic_versions(rows) == [
        (0, 5, 6, "TOPIC_ADDED", "CONFIG_CHANGED"),
        (5, 9, 2, "CONFIG_CHANGED", "CONFIG_CHANGED"),
        (9, None, 2, "CONFIG_CHANGED", None),
    ]


def test_group_created_and_removed_in_one_instant_leaves_only_liveness(tmp_path):
    rows = run_exact(tmp_path, [reg(T0 + 3), unreg(T0 + 3), reg(T0 + 8, topics={"U": 6})], T0 + 20)
    assert topic_versions(rows) == []
    assert [r["valid_from"] - T0 for r in rows[BROKER_MEMBERSHIP_HISTORY]] == [8]
    assert [
        (r["event_time"] - T0, r["seq"], r["event_type"]) for r in rows[BROKER_LIVENESS_EVENTS]
    ] == [(3, 0, "REGISTERED"), (3, 1, "UNREGISTERED"), (8, 0, "REGISTERED")]
    assert as_of(rows, T0 + 3)["liveBrokers"] == []


def test_expiry_is_stamped_deadline_plus_one_whatever_detects_it(tmp_path):
    deadline = T0 + 1000 + 30_000
    events = [reg(T0 + 1000, timeout=30_000)]
    clock = GroupClock(GroupRoutes("broker-a"))
    clock.add(events[0], ("f", 0))
    transitions = list(iter_transitions(clock, deadline + 50_000, FLAGS, Advance()))
    expiry = transitions[-1]
    assert (expiry.kind, expiry.time, expiry.detected_at) == (
        "EXPIRE",
        deadline + 1,
        deadline + 50_000,
    )
    rows = run_exact(tmp_path, events, deadline + 50_000)
    (expired,) = [r for r in rows[BROKER_LIVENESS_EVENTS] if r["event_type"] == "EXPIRED"]
    assert (expired["event_time"], expired["deadline"]) == (deadline + 1, deadline)
    assert topic_versions(rows) == [(1000, 31_001, 6, "TOPIC_ADDED", "GROUP_REMOVED")]
    (member,) = rows[BROKER_MEMBERSHIP_HISTORY]
    assert (member["end_reason"], member["end_event"]) == ("EXPIRED", "EXPIRE")


def test_expiry_and_registration_in_the_same_ms(tmp_path):
    # expires at deadline + 1 = 30_001, before the registration at 30_001 is applied
    rows = run_exact(
        tmp_path, [reg(T0, timeout=30_000), reg(T0 + 30_001, topics={"T": 6})], T0 + 40_000
    )
    assert topic_versions(rows) == [
        (0, 30_001, 6, "TOPIC_ADDED", "GROUP_REMOVED"),
        (30_001, None, 6, "TOPIC_ADDED", None),
    ]
    assert [r["event_type"] for r in rows[BROKER_LIVENESS_EVENTS]] == [
        "REGISTERED",
        "EXPIRED",
        "REGISTERED",
    ]


def test_brokers_expiring_together(tmp_path):
    slave = "10.0.0.2:10911"
    events = [reg(T0, timeout=60_000), reg(T0 + 30_000, addr=slave, broker_id=1, timeout=30_000)]
    rows = run_exact(tmp_path, events, T0 + 100_000)  # both deadlines are T0 + 60_000
    expired = [
        (r["broker_addr"], r["event_time"] - T0, r["seq"])
        for r in rows[BROKER_LIVENESS_EVENTS]
        if r["event_type"] == "EXPIRED"
    ]
    assert expired == [("10.0.0.1:10911", 60_001, 0), (slave, 60_001, 1)]
    (topic,) = rows[TOPIC_ROUTE_HISTORY]
    assert topic["end_broker_addr"] == slave  # the removal that emptied the group


def test_role_switch_and_takeover_reasons(tmp_path):
    a, b = "10.0.0.1:10911", "10.0.0.2:10911"
    events = [
        reg(T0, addr=a),
        reg(T0 + 1, addr=b, broker_id=1),
        reg(T0 + 2, addr=b, broker_id=0, state_version=1),  # b takes id 0 from a
        reg(T0 + 3, addr=a, broker_id=1),
    ]
    rows = run_exact(tmp_path, events, T0 + 10)
    got = sorted(
        (r["broker_id"], r["broker_addr"], r["valid_from"] - T0, r["start_reason"], r["end_reason"])
        for r in rows[BROKER_MEMBERSHIP_HISTORY]
    )
    assert got == [
        (0, a, 0, "REGISTERED", "REPLACED"),
        (0, b, 2, "ROLE_SWITCH", None),
        (1, a, 3, "REGISTERED", None),
        (1, b, 1, "REGISTERED", "ROLE_SWITCH"),
    ]


def test_rejected_registration_leaves_the_live_table(tmp_path):
    a, b = "10.0.0.1:10911", "10.0.0.2:10911"
    events = [
        reg(T0, addr=a, state_version=5),
        reg(T0 + 1, addr=b, broker_id=1, state_version=5),
        reg(T0 + 2, addr=b, broker_id=0, state_version=3),
    ]  # stale: rejected
    rows = run_exact(tmp_path, events, T0 + 10)
    assert [(r["broker_addr"], r["event_type"]) for r in rows[BROKER_LIVENESS_EVENTS]] == [
        (a, "REGISTERED"),
        (b, "REGISTERED"),
        (b, "REJECTED"),
    ]


def test_topic_deleted_on_registration(tmp_path):
    flags = RouteFlags(delete_topic_with_broker_registration=True)
    events = [reg(T0, topics={"T": 6, "U": 6}), reg(T0 + 5, topics={"U": 6}, counter=2)]
    rows = run_exact(tmp_path, events, T0 + 10, flags)
    assert topic_versions(rows) == [(0, 5, 6, "TOPIC_ADDED", "TOPIC_DELETED")]


def test_two_clusters_for_one_broker_name(tmp_path):
    # the group's cluster set keeps the second name: not derivable from brokerAddrTable
    events = [reg(T0), reg(T0 + 1, addr="10.0.0.2:10911", broker_id=1, cluster="C2"), unreg(T0 + 2)]
    rows = run_exact(tmp_path, events, T0 + 10)
    assert sorted((r["cluster_name"], r["valid_to"]) for r in rows[CLUSTER_MEMBERSHIP_HISTORY]) == [
        ("C1", None),
        ("C2", None),
    ]


# ---- the writer's side --------------------------------------------------------------------


def test_merging_a_batch_twice_changes_nothing(tmp_path):
    clock, tracker = GroupClock(GroupRoutes("broker-a")), HistoryTracker("broker-a")
    for i, event in enumerate([reg(T0), reg(T0 + 5, topics={"T": 4}, counter=2), unreg(T0 + 9)]):
        clock.add(event, ("f", i))
    _, first = tracker.advance(clock, T0 + 6, FLAGS)
    _, second = tracker.advance(clock, T0 + 20, FLAGS)
    run = HistoryRun([first, second], T0 + 20)
    once = written(run, tmp_path)
    assert all(r["valid_to"] is not None for t in INTERVAL_TABLES for r in once[t])
    versions = {t: DeltaTable(str(tmp_path / t)).version() for t in HISTORY_TABLES}
    # Replayed by the same writer (after a crash): its txn marks skip every commit.
    commit(WriterWarehouse(tmp_path, specs=()), run)
    assert {t: DeltaTable(str(tmp_path / t)).version() for t in HISTORY_TABLES} == versions
    # Merged again under another writer's txn: committed, and no row changes.
    commit(WriterWarehouse(tmp_path, specs=(), app_id="another-writer"), run)
    assert DeltaTable(str(tmp_path / TOPIC_ROUTE_HISTORY)).version() > versions[TOPIC_ROUTE_HISTORY]
    assert read_rows(tmp_path) == once


def test_compaction_folds_open_and_close_of_one_row(tmp_path):
    row = {
        "topic": "T",
        "broker_name": "b",
        "valid_from": 1,
        "valid_to": None,
        "perm": 6,
        "ended_by": None,
        "end_event": None,
        "end_broker_addr": None,
        "event_date": "x",
    }
    close = {
        "topic": "T",
        "broker_name": "b",
        "valid_from": 1,
        "valid_to": 4,
        "ended_by": "CONFIG_CHANGED",
        "end_event": "REGISTER",
        "end_broker_addr": "a",
        "event_date": "x",
    }
    (folded,) = compact_changes(
        [
            HistoryChange(TOPIC_ROUTE_HISTORY, UPSERT, row),
            HistoryChange(TOPIC_ROUTE_HISTORY, "close", close),
        ]
    )
    assert folded.op == UPSERT and folded.row == {**row, **close}
    # why: the writer's MERGE refuses two changes of one row in a batch
    warehouse = WriterWarehouse(tmp_path, [spec(TOPIC_ROUTE_HISTORY)])
    warehouse.merge(TOPIC_ROUTE_HISTORY, [("upsert", row)], 0)
    with pytest.raises(Exception, match="multiple source rows"):
        warehouse.merge(TOPIC_ROUTE_HISTORY, [("upsert", row), ("close", close)], 1)


def test_tracker_state_round_trip():
    clock, tracker = GroupClock(GroupRoutes("broker-a")), HistoryTracker("broker-a")
    for i, event in enumerate(events_of(fixture_lines("08_role_switch"))):
        if event.brokerName == "broker-a":
            clock.add(event, ("f", i))
    tracker.advance(clock, T0 + 10_000, FLAGS)
    assert any(tracker.open_since.values()) and not tracker.is_idle()
    state = encode_history(tracker)
    restored = decode_history(state)
    assert encode_history(restored) == state  # the topic opens pass through undecoded
    assert restored.topic_opens_blob == state[1]
    restored.opens(TOPIC_ROUTE_HISTORY)  # decode them
    assert restored == tracker


def test_event_date_is_utc_day():
    assert event_date(T0) == "2025-11-24"
    assert event_date(1_764_028_799_999) == "2025-11-24"
    assert event_date(1_764_028_800_000) == "2025-11-25"
