"""Property tests of the core with Hypothesis: drawn broker-event histories (every event type,
integers over their schema ranges, disorder within the watermark delay) cut into drawn
micro-batches, through the shipped per-group step (routing_lib/core/step.py, driven as Spark
drives it by tests/support/stream_model.py) equal the plain sequential replay
(routing_lib/core/replay.py), after every batch and at the end.

Budgets: tests/support/event_strategies.py (`profile`). A failing example Hypothesis finds is
added below as an explicit test.
"""

from __future__ import annotations

import json

from hypothesis import event, given

from routing_lib.core.codec import decode_clock
from routing_lib.core.content import CONTENT
from routing_lib.core.dump import project
from routing_lib.core.group_routes import DEFAULT_FLAGS, BrokerKey, GroupRoutes, apply_event
from routing_lib.core.replay import replay, replay_dumps
from routing_lib.core.tables import BROKER_LIVE
from schemas import ChannelClosedEvent, TickEvent, parse_event
from tests.support.event_strategies import History, histories, profile
from tests.support.stream_model import StreamModel


def run_history(history: History) -> tuple[StreamModel, list[tuple[int, dict]]]:
    """The model over the history's micro-batches, checked against the replay after each
    batch (the published watermark) and once the watermark passed every event; returns the
    model and the (watermark, dump) after each batch."""
    events = [parse_event(json.dumps(record)) for record in history.records]
    model = StreamModel(history.delay_ms, history.content_refs, history.flags)
    seen: list[tuple[int, dict]] = []
    arrived = 0
    for batch in history.batches:
        items = [(events[arrived + n], ("file", arrived + n)) for n in range(len(batch))]
        arrived += len(batch)
        model.batch(items)
        seen.append((model.published, model.dump()))
    final = max(max(e.eventTime for e in events) - history.delay_ms, 0)
    model.finish(final)
    seen.append((model.published, model.dump()))
    assert model.late == 0
    assert model.published == final
    expected = dict(replay_dumps(events, [t for t, _ in seen], history.flags))
    for watermark, dump in seen:
        assert dump == project(expected[watermark]), f"at watermark {watermark}"
    # the connections each live broker holds, which decide later removals, agree too
    replayed = replay(events, final, history.flags)
    assert model_channels(model) == {
        (name, key): held
        for name, routes in replayed.items()
        for key, held in routes.channels.items()
    }
    return model, seen


def model_channels(model: StreamModel) -> dict[tuple[str, BrokerKey], tuple[str, ...]]:
    """Every group's channel sets, as the model's saved states hold them."""
    held = {}
    for name, saved in model.states.items():
        routes = decode_clock((saved.clock, CONTENT.resolve(saved.topics))).routes
        held.update({(name, key): channels for key, channels in routes.channels.items()})
    return held


@profile()
@given(histories())
def test_drawn_histories_in_drawn_micro_batches_equal_the_replay(history: History) -> None:
    _, seen = run_history(history)
    # what the drawn histories reach (shown by --hypothesis-show-statistics)
    final_dump = seen[-1][1]
    most_live = max(len(dump["brokerLiveTable"]) for _, dump in seen)
    most_topics = max(len(dump["topicQueueTable"]) for _, dump in seen)
    event(f"most live brokers published: {min(most_live, 3)}")
    event(f"most topics published: {min(most_topics, 3)}")
    event(f"kv at the end: {'kvConfigTable' in final_dump}")
    registered = {(r["clusterName"], r["brokerAddr"]) for r in history.records if "brokerAddr" in r}
    event(f"a broker expired or left: {len(final_dump['brokerLiveTable']) < len(registered)}")
    names = {
        (r["clusterName"], r["brokerAddr"], r["brokerName"])
        for r in history.records
        if "brokerAddr" in r
    }
    event(f"an address under two brokerNames: {len(names) > len(registered)}")
    event(f"brokers removed by their last connection's close: {min(channel_removals(history), 2)}")


def channel_removals(history: History) -> int:
    """How many CHANNEL_CLOSED events of the history removed a live broker (the replay's
    sequential loop, watching the live table around each close)."""
    events = sorted(
        enumerate(parse_event(json.dumps(r)) for r in history.records),
        key=lambda item: (item[1].eventTime, item[0]),
    )
    groups: dict[str, GroupRoutes] = {}
    removed = 0
    for _, e in events:
        for routes in groups.values():
            routes.expire(e.eventTime)
        if isinstance(e, TickEvent) or not hasattr(e, "brokerAddr"):
            continue  # a tick or an administrative event: no broker's connections
        routes = groups.setdefault(e.brokerName, GroupRoutes(e.brokerName))
        was_live = (e.clusterName, e.brokerAddr) in routes.live
        apply_event(routes, e, history.flags)
        gone = (e.clusterName, e.brokerAddr) not in routes.live
        removed += isinstance(e, ChannelClosedEvent) and was_live and gone
    return removed


# ---- failing examples Hypothesis found -------------------------------------------------------


def _register(name: str, addr: str, at: int) -> dict:
    return {
        "eventType": "REGISTER",
        "eventTime": at,
        "clusterName": "C2",
        "brokerAddr": addr,
        "brokerName": name,
        "brokerId": 0,
        "dataVersion": {"stateVersion": 0, "timestamp": 0, "counter": 0},
        "topicConfigTable": {},
    }


def _run(batches: list[list[dict]], delay_ms: int) -> StreamModel:
    """The model over these micro-batches (checked against the replay after each); returns it."""
    records = [r for batch in batches for r in batch]
    sizes = [len(batch) for batch in batches]
    return run_history(History(records, delay_ms, sizes, DEFAULT_FLAGS, content_refs=False))[0]


def _live(model: StreamModel) -> list[tuple[str, str, int]]:
    return [
        (row["clusterName"], row["brokerAddr"], row["lastUpdateTimestamp"])
        for row in model.dump()["brokerLiveTable"]
    ]


def test_one_address_under_two_broker_names() -> None:
    """Found by Hypothesis (shrunk): a broker renamed at the same address, both registrations
    applied in one batch. RocketMQ keeps one BrokerLiveInfo per (cluster, address), the latest
    registration's; each group writes its own row, and the dump shows the latest."""
    records = [_register("broker-b", "[::1]:65535", 1), _register("broker-a", "[::1]:65535", 2)]
    events = [parse_event(json.dumps(r)) for r in records]
    model = StreamModel(1, content_refs=False)
    model.batch([(e, ("file", n)) for n, e in enumerate(events)])
    model.finish(2)
    live = model.dump()["brokerLiveTable"]
    keys = [(row["clusterName"], row["brokerAddr"]) for row in live]
    assert len(keys) == len(set(keys)), live
    assert _live(model) == [("C2", "[::1]:65535", 2)]
    # both groups keep their own row under the catalog's key
    assert sorted(model.tables[BROKER_LIVE]) == [
        ("C2", "[::1]:65535", "broker-a"),
        ("C2", "[::1]:65535", "broker-b"),
    ]


def test_renamed_broker_across_batches_outlives_the_old_name() -> None:
    """The old name's registration is published; in a later batch its heartbeat and the new
    name's registration (two changes of a row the table has: a Delta MERGE refuses them when
    both carry one key); then the old name expires in a third batch: its row goes, the new
    name's row stays."""
    old = {**_register("broker-old", "h:1", 1_000), "heartbeatTimeoutMillis": 30_000}
    heartbeat = {**old, "eventType": "HEARTBEAT", "eventTime": 19_000}
    new = _register("broker-new", "h:1", 20_000)
    tick = lambda at: {"eventType": "TICK", "eventTime": at}  # noqa: E731
    batches = [[old, tick(12_000)], [heartbeat, new, tick(25_000)], [tick(60_000)]]
    model = _run(batches, delay_ms=1_000)
    assert _live(model) == [("C2", "h:1", 20_000)]
    assert list(model.tables[BROKER_LIVE]) == [("C2", "h:1", "broker-new")]


def test_renamed_broker_shows_the_latest_registration_and_its_filter_servers() -> None:
    """Both names stay live: the dump shows the registration or heartbeat seen last, and the
    filter servers of the latest name that has some."""
    b = {**_register("broker-b", "h:1", 1_000), "filterServerList": ["f:1"]}
    a = _register("broker-a", "h:1", 2_000)
    heartbeat = {k: b[k] for k in ("clusterName", "brokerAddr", "brokerName", "brokerId")}
    tick = lambda at: {"eventType": "TICK", "eventTime": at}  # noqa: E731
    model = _run([[b, a, tick(5_000)]], delay_ms=1_000)
    dump = model.dump()
    assert _live(model) == [("C2", "h:1", 2_000)]
    assert dump["filterServerTable"] == [
        {"clusterName": "C2", "brokerAddr": "h:1", "filterServerList": ["f:1"]}
    ]
    a_filters = {**a, "eventTime": 3_000, "filterServerList": ["f:2"]}
    model = _run([[b, a, a_filters, tick(5_000)]], delay_ms=1_000)
    assert model.dump()["filterServerTable"][0]["filterServerList"] == ["f:2"]
    # the old name's heartbeat, seen last, makes its registration the one shown
    beat = {**heartbeat, "eventType": "HEARTBEAT", "eventTime": 4_000}
    model = _run([[b, a_filters, beat, tick(6_000)]], delay_ms=1_000)
    assert _live(model) == [("C2", "h:1", 4_000)]
    assert model.dump()["filterServerTable"][0]["filterServerList"] == ["f:1"]
