"""Connections (contract §2, "Connections (channels)"; RocketMQ's BrokerHousekeepingService ->
RouteInfoManager.onChannelDestroy): each live broker's channel set, CHANNEL_CLOSED removing a
broker exactly as expiry does, at the event's time, in the replay and in the shipped step cut
into micro-batches; the history rows naming the cause; the state's encoding (old states load).
"""

from __future__ import annotations

import json
import random

import pytest

from routing_lib.core.clock import GroupClock
from routing_lib.core.codec import decode_clock, encode_clock
from routing_lib.core.dump import project
from routing_lib.core.group_routes import DEFAULT_FLAGS, GroupRoutes
from routing_lib.core.history import CHANNEL_CLOSED, HistoryTracker
from routing_lib.core.replay import replay, replay_dump
from routing_lib.core.step import BatchContext, InputRow, StepConfig, step_group
from routing_lib.core.wire import pack_event
from schemas import parse_event
from tests.support.event_strategies import History
from tests.support.helpers import random_history
from tests.support.stream_model import run_model_in_batches
from tests.test_core_properties import channel_removals, model_channels

T = 1_764_000_000_000
MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"
DELAY_MS = 10_000


def register(addr: str, at: int, channel: str | None = None, broker_id: int = 0, **extra) -> dict:
    record = {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C1",
        "brokerAddr": addr,
        "brokerName": "broker-a",
        "brokerId": broker_id,
        "dataVersion": {
            "stateVersion": extra.pop("state_version", 0),
            "timestamp": 1,
            "counter": 1,
        },
        "topicConfigTable": {"Orders": {"topicName": "Orders", "readQueueNums": 4}},
        **extra,
    }
    return record | ({} if channel is None else {"channel": channel})


def heartbeat(addr: str, at: int, channel: str | None = None, broker_id: int = 0) -> dict:
    record = {
        "eventType": "HEARTBEAT",
        "eventTime": at,
        "clusterName": "C1",
        "brokerAddr": addr,
        "brokerName": "broker-a",
        "brokerId": broker_id,
    }
    return record | ({} if channel is None else {"channel": channel})


def closed(addr: str, at: int, channel: str, broker_id: int = 0) -> dict:
    return heartbeat(addr, at, channel, broker_id) | {"eventType": "CHANNEL_CLOSED"}


def unregister(addr: str, at: int) -> dict:
    return heartbeat(addr, at) | {"eventType": "UNREGISTER"}


def final_routes(records: list[dict], until: int) -> GroupRoutes:
    """The reference replay's broker-a at `until`, checked against the shipped step in random
    micro-batches (three cuts) at the history's final watermark."""
    events = [parse_event(json.dumps(r)) for r in records]
    tick = parse_event(json.dumps({"eventType": "TICK", "eventTime": until + DELAY_MS}))
    for seed in range(3):
        model = run_model_in_batches([*events, tick], random.Random(seed), DELAY_MS, seed == 1)
        assert model.late == 0
        assert model.dump() == project(replay_dump(events, until)), f"seed {seed}"
    return replay(events, until).get("broker-a") or GroupRoutes("broker-a")


def live(routes: GroupRoutes) -> set[str]:
    return {addr for _, addr in routes.live}


# ---- the contract's effect, case by case ------------------------------------------------------


def test_the_last_connection_closing_removes_the_broker_at_once_with_the_cascade():
    """A crashed master (one collector): its connection closes 2 s after its registration;
    the group and its topics leave at the close's time, not 120 s later."""
    records = [
        register(MASTER, T, "collector-1@100#1"),
        closed(MASTER, T + 2_000, "collector-1@100#1"),
    ]
    before = final_routes(records, T + 1_999)
    assert live(before) == {MASTER} and before.topics
    after = final_routes(records, T + 2_000)
    assert after.is_empty()  # brokerAddrTable, clusterAddrTable, topics: gone as by expiry


def test_a_slave_keeps_the_group_when_the_masters_connection_closes():
    records = [
        register(MASTER, T, "collector-1@100#1"),
        register(SLAVE, T + 100, "collector-1@100#2", broker_id=1),
        closed(MASTER, T + 2_000, "collector-1@100#1"),
    ]
    routes = final_routes(records, T + 5_000)
    assert live(routes) == {SLAVE}
    assert routes.broker_data is not None and routes.broker_data.broker_addrs == {1: SLAVE}


def test_a_broker_carried_by_two_collectors_leaves_when_both_connections_closed():
    records = [
        register(MASTER, T, "collector-1@100#1"),
        heartbeat(MASTER, T + 50, "collector-2@200#7"),
        closed(MASTER, T + 1_000, "collector-1@100#1"),
    ]
    assert live(final_routes(records, T + 5_000)) == {MASTER}
    records.append(closed(MASTER, T + 6_000, "collector-2@200#7"))
    assert final_routes(records, T + 6_000).is_empty()


def test_a_collector_restart_drops_its_older_connections_without_removing_the_broker():
    records = [
        register(MASTER, T, "collector-1@100#1"),
        heartbeat(MASTER, T + 10_000, "collector-1@300#1"),  # collector-1 restarted at 300
    ]
    routes = final_routes(records, T + 10_000)
    assert routes.channels[("C1", MASTER)] == ("collector-1@300#1",)
    # the old connection's close (stale) changes nothing; the new one's removes
    records.append(closed(MASTER, T + 11_000, "collector-1@100#1"))
    assert live(final_routes(records, T + 11_000)) == {MASTER}
    records.append(closed(MASTER, T + 12_000, "collector-1@300#1"))
    assert final_routes(records, T + 12_000).is_empty()


def test_incarnations_compare_as_numbers_and_other_collectors_are_kept():
    records = [
        register(MASTER, T, "collector-1@99#1"),
        heartbeat(MASTER, T + 1, "collector-2@5#1"),
        heartbeat(MASTER, T + 2, "collector-1@100#4"),  # "100" < "99" as text
    ]
    routes = final_routes(records, T + 2)
    assert routes.channels[("C1", MASTER)] == ("collector-2@5#1", "collector-1@100#4")
    # a request of an earlier incarnation arriving later drops nothing and is added
    records.append(heartbeat(MASTER, T + 3, "collector-1@50#9"))
    routes = final_routes(records, T + 3)
    assert routes.channels[("C1", MASTER)] == (
        "collector-2@5#1",
        "collector-1@100#4",
        "collector-1@50#9",
    )


def test_a_registration_that_makes_the_broker_live_starts_an_empty_set():
    """Expired on connection #1, back on #2: #1's late close names a connection of its
    previous life and changes nothing."""
    records = [
        register(MASTER, T, "collector-1@100#1"),
        register(MASTER, T + 200_000, "collector-1@100#2"),  # expired at T + 120 001
        closed(MASTER, T + 201_000, "collector-1@100#1"),
    ]
    routes = final_routes(records, T + 201_000)
    assert live(routes) == {MASTER}
    assert routes.channels[("C1", MASTER)] == ("collector-1@100#2",)
    # and after an UNREGISTER too
    records = [
        register(MASTER, T, "collector-1@100#1"),
        unregister(MASTER, T + 1_000),
        register(MASTER, T + 2_000),  # no channel: an archive's
        closed(MASTER, T + 3_000, "collector-1@100#1"),
    ]
    routes = final_routes(records, T + 3_000)
    assert live(routes) == {MASTER} and ("C1", MASTER) not in routes.channels


@pytest.mark.parametrize(
    "extra",
    [
        [closed(MASTER, T + 1_000, "collector-1@100#9")],  # a connection it never used
        [closed(SLAVE, T + 1_000, "collector-1@100#1", broker_id=1)],  # a broker never live
        [
            heartbeat(SLAVE, T + 500, "collector-1@100#3", 1),
            closed(SLAVE, T + 1_000, "collector-1@100#3", 1),
        ],
        [closed(MASTER.replace("1:", "9:"), T + 1_000, "collector-1@100#1")],  # another address
    ],
    ids=["unknown channel", "not live", "heartbeat of a broker not live", "other address"],
)
def test_closes_that_change_nothing(extra):
    records = [register(MASTER, T, "collector-1@100#1"), *extra]
    routes = final_routes(records, T + 1_000)
    assert live(routes) == {MASTER}
    assert routes.channels == {("C1", MASTER): ("collector-1@100#1",)}


def test_a_repeated_close_and_a_close_after_the_unregister_remove_once():
    """A broker stopped cleanly: UNREGISTER, then its connection's close (after the removal:
    nothing left to remove), then a repeat."""
    records = [
        register(MASTER, T, "collector-1@100#1"),
        register(SLAVE, T + 1, "collector-1@100#2", broker_id=1),
        unregister(SLAVE, T + 1_000),
        closed(SLAVE, T + 1_050, "collector-1@100#2", broker_id=1),
        closed(SLAVE, T + 1_060, "collector-1@100#2", broker_id=1),
    ]
    assert live(final_routes(records, T + 2_000)) == {MASTER}
    history = liveness(records, T + 2_000)
    assert [(r["broker_addr"], r["event_type"]) for r in history] == [
        (MASTER, "REGISTERED"),
        (SLAVE, "REGISTERED"),
        (SLAVE, "UNREGISTERED"),
    ]


def test_a_rejected_registration_drops_the_brokers_connections():
    """A stale stateVersion for a broker id held by a newer broker: refused, and the address
    leaves brokerLiveTable with its connections (a later close finds nothing)."""
    records = [
        register(MASTER, T, "collector-1@100#1", state_version=5),
        register(SLAVE, T + 1, "collector-1@100#2", broker_id=1),
        register(SLAVE, T + 2, "collector-1@100#2", state_version=1),  # takes id 0: refused
    ]
    routes = final_routes(records, T + 2)
    assert live(routes) == {MASTER}
    assert ("C1", SLAVE) not in routes.channels


def test_leading_zeros_name_the_same_connection():
    records = [
        register(MASTER, T, "collector-1@0100#01"),
        closed(MASTER, T + 5, "collector-1@100#1"),
    ]
    assert final_routes(records, T + 5).is_empty()


def test_golden_18_in_random_batches_through_the_step():
    """tests/golden/18_channel_close, one event per batch as well (every close in a batch of
    its own after the state was saved and loaded)."""
    from tests.support.helpers import expected_dump, fixture_lines

    events = [parse_event(line) for line in fixture_lines("18_channel_close")]
    model = run_model_in_batches(events, random.Random(7), DELAY_MS, content_refs=True)
    assert model.dump() == expected_dump("18_channel_close")


# ---- history: the cause recorded ---------------------------------------------------------------


def history_changes(records: list[dict], until: int) -> list:
    """The history changes of broker-a's clock advanced to `until`."""
    clock = GroupClock(GroupRoutes("broker-a"))
    for n, record in enumerate(records):
        clock.add(parse_event(json.dumps(record)), ("f", n))
    _, changes = HistoryTracker("broker-a").advance(clock, until, DEFAULT_FLAGS)
    return changes


def liveness(records: list[dict], until: int) -> list[dict]:
    return [c.row for c in history_changes(records, until) if c.table == "broker_liveness_events"]


def test_history_names_the_closed_connection_as_the_cause():
    records = [
        register(MASTER, T, "collector-1@100#1"),
        closed(MASTER, T + 2_000, "collector-1@100#1"),
    ]
    changes = history_changes(records, T + 5_000)
    by_table: dict[str, list[dict]] = {}
    for change in changes:
        by_table.setdefault(change.table, []).append(change.row)
    left = by_table["broker_liveness_events"][-1]
    assert (left["event_type"], left["event_time"], left["broker_id"]) == (
        CHANNEL_CLOSED,
        T + 2_000,
        0,
    )
    assert left["deadline"] is None  # removed by its connection, not its heartbeat timeout
    (member,) = by_table["broker_membership_history"]
    assert (member["valid_to"], member["end_reason"], member["end_event"]) == (
        T + 2_000,
        CHANNEL_CLOSED,
        CHANNEL_CLOSED,
    )
    (topic,) = by_table["topic_route_history"]
    assert (topic["valid_to"], topic["ended_by"], topic["end_event"], topic["end_broker_addr"]) == (
        T + 2_000,
        "GROUP_REMOVED",
        CHANNEL_CLOSED,
        MASTER,
    )
    (cluster,) = by_table["cluster_membership_history"]
    assert (cluster["valid_to"], cluster["end_event"]) == (T + 2_000, CHANNEL_CLOSED)


# ---- the state's encoding ------------------------------------------------------------------------

# broker-a's state as the code before connections (fcecb44) saved it: two live brokers, a
# HEARTBEAT pending (packed without a channel), the history's open intervals.
OLD_STATE = (
    '{"v":2,"watermark":1764000010000,"name":"broker-a","broker":["C1",[[0,"10.0.0.1:10911"],'
    '[1,"10.0.0.2:10911"]],false,null],"clusters":["C1"],"live":[["C1","10.0.0.1:10911",'
    '1764000000000,120000,[0,1,1],null],["C1","10.0.0.2:10911",1764000000500,120000,[0,1,1],'
    'null]],"filters":[],"pending":[["k-0",2,"{\\"eventTime\\":1764000020000,\\"clusterName\\":'
    '\\"C1\\",\\"brokerAddr\\":\\"10.0.0.1:10911\\",\\"brokerName\\":\\"broker-a\\",'
    '\\"brokerId\\":0,\\"eventType\\":\\"HEARTBEAT\\"}",1764000020000]]}',
    "Orders\x1e[[4,4,6,0]]",
    '{"v":2,"name":"broker-a","open":{"broker_membership_history":[["C1","broker-a",0,'
    '"10.0.0.1:10911",1764000000000],["C1","broker-a",1,"10.0.0.2:10911",1764000000500]],'
    '"cluster_membership_history":[["C1","broker-a",1764000000000]]},"instant":[1764000000500,1]}',
    '[["Orders",1764000000000]]',
)


def test_a_state_saved_before_connections_loads_with_empty_sets_in_spark_state():
    """The old state in pyspark's own GroupState, through the applyInPandasWithState step:
    its brokers hold no connection (a close changes nothing), a request adds one."""
    from tests.support.step_support import group_state, run_step

    assert decode_clock(OLD_STATE[:2]).routes.channels == {}
    state = group_state(OLD_STATE)
    rows = [
        heartbeat(SLAVE, T + 21_000, "collector-1@100#4", broker_id=1),
        closed(MASTER, T + 22_000, "collector-1@100#4"),  # not the master's: nothing
        closed(SLAVE, T + 30_000, "collector-1@100#4", broker_id=1),
    ]
    packed = [
        (r["eventTime"], "k-1", n, pack_event(parse_event(json.dumps(r))))
        for n, r in enumerate(rows)
    ]
    out = run_step(packed, state, watermark=T + 40_000, group="broker-a")
    routes = decode_clock(state.get[:2]).routes
    assert {addr: b.last_update_timestamp for (_, addr), b in routes.live.items()} == {
        MASTER: T + 20_000  # the old state's pending heartbeat, applied
    }
    assert routes.channels == {}
    liveness_rows = [
        row for r in out[out.table == "broker_liveness_events"].row_json for row in json.loads(r)
    ]
    assert [(r["broker_addr"], r["event_type"], r["event_time"]) for r in liveness_rows] == [
        (SLAVE, CHANNEL_CLOSED, T + 30_000)
    ]


def test_channel_sets_round_trip_and_cost_only_where_held():
    records = [
        register(MASTER, T, "collector-1@1764000000000#17"),
        heartbeat(MASTER, T + 1, "collector-2@1764000000123#3"),
        register(SLAVE, T + 2, broker_id=1),  # no channel: no entry
    ]
    clock = GroupClock(GroupRoutes("broker-a"))
    for n, record in enumerate(records):
        clock.add(parse_event(json.dumps(record)), ("f", n))
    clock.advance(T + 5, DEFAULT_FLAGS)
    text, topics = encode_clock(clock)
    assert decode_clock((text, topics)).routes.channels == clock.routes.channels
    assert list(clock.routes.channels) == [("C1", MASTER)]
    without = GroupClock(clock.routes, watermark=clock.watermark)
    without.routes.channels = {}
    # two connections of one broker: its address, its cluster and the two channel texts
    cost = len(text) - len(encode_clock(without)[0])
    assert cost == len(
        ',"channels":[["C1","10.0.0.1:10911",["collector-1@1764000000000#17",'
        '"collector-2@1764000000123#3"]]]'
    )


def test_the_step_saves_the_channels_between_batches():
    """A close in a later micro-batch than the request that opened its connection."""
    config = StepConfig(DEFAULT_FLAGS)
    saved = None
    batches = [
        [register(MASTER, T, "collector-1@100#1")],
        [closed(MASTER, T + 3_000, "collector-1@100#1")],
    ]
    out = []
    for n, batch in enumerate(batches):
        rows = [
            InputRow(r["eventTime"], ("f", n), pack_event(parse_event(json.dumps(r))))
            for r in batch
        ]
        context = BatchContext(T + 10_000 * n, T + 10_000 * (n - 1))
        result = step_group("broker-a", saved, rows, context, config)
        saved, out = result.state, result.rows
    # the group is gone: no route and no connection left; its state keeps only the absent
    # group's topic base, so that a return with the same table is O(1) (issue 36)
    assert saved is not None
    routes = decode_clock((saved.clock, saved.topics)).routes
    assert routes.is_empty() and not routes.channels and not routes.topic_state.overlay.present
    assert any(r.table == "broker_liveness_events" and CHANNEL_CLOSED in r.row_json for r in out)


def test_the_console_ends_the_alive_interval_with_the_close():
    """The broker page's alive intervals (routing_lib/console/timelines.py) from these rows."""
    from routing_lib.console.timelines import liveness_intervals

    records = [
        register(MASTER, T, "collector-1@100#1"),
        closed(MASTER, T + 2_000, "collector-1@100#1"),
    ]
    (interval,) = liveness_intervals(liveness(records, T + 5_000))
    assert (interval["from"], interval["to"], interval["end"]) == (T, T + 2_000, CHANNEL_CLOSED)


@pytest.mark.parametrize("seed,collectors", [(21, 1), (22, 2)])
def test_simulated_fleet_with_connections_in_random_batches(seed, collectors):
    """A simulated fleet as one or two collectors publish it (routelake_dev/simulator/
    channels.py: closes after crashes and clean shutdowns, idle and stale closes, collector
    restarts) through the shipped step in random micro-batches of 1-40 events: the published
    tables and every group's channel sets equal the replay's."""
    rng = random.Random(seed)
    records = random_history(seed, rng, collectors)
    events = [parse_event(json.dumps(r)) for r in records]
    final = max(e.eventTime for e in events) - DELAY_MS
    model = run_model_in_batches(events, rng, DELAY_MS, content_refs=True)
    assert model.late == 0
    assert model.dump() == project(replay_dump(events, final))
    replayed = replay(events, final)
    assert model_channels(model) == {
        (name, key): held
        for name, routes in replayed.items()
        for key, held in routes.channels.items()
    }
    # the history has brokers removed by their last connection's close
    assert channel_removals(History(records, DELAY_MS, [len(records)], DEFAULT_FLAGS, True)) > 0
