"""The lookup's snapshots at scale: incremental refresh from the change feed equals a full
reload, pinned versions never mix batches, route bytes joined from fragments equal the
rendered route objects, and a reader's snapshot never changes under it. The tables are
written by the job's Delta writer (delta-rs, no Spark: tests/support/writer_support.py)."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.core.replay import default_watermark, fleet_rows, replay
from routing_lib.core.tables import (
    BROKER_ADDR,
    BROKER_LIVE,
    CLUSTER_ADDR,
    FILTER_SERVER,
    KV_CONFIG,
    PROGRESS,
    TOPIC_QUEUE,
    Row,
)
from routing_lib.lookup import jsonbody
from routing_lib.lookup.base_index import BaseIndex
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.route_topics import RouteTopics
from routing_lib.lookup.routes import ORDER_TOPIC_CONFIG, RouteIndex
from routing_lib.lookup.snapshots import load_index, next_index
from routing_lib.lookup.topic_store import TopicStore
from routing_lib.read.warehouse import WarehouseSnapshot
from schemas import parse_event
from tests.support.helpers import seeds
from tests.support.lookup_support import (
    GOLDEN,
    Warehouse,
    addr,
    arrow_schema,
    live,
    queue,
    snapshot,
    tables,
)
from tests.support.snapshot_support import (
    Change,
    fleet,
    group_layout,
    key_of,
    one_per_key,
    upserts,
)
from tests.support.writer_support import WriterWarehouse

FLAGS = [
    {"support_acting_master": False, "order_message_enable": False},
    {"support_acting_master": True, "order_message_enable": True},
]


def same_answers(got: RouteIndex, want: RouteIndex) -> None:
    """Every answer the lookup gives, byte for byte."""
    assert got.topics == want.topics
    assert got.versions == want.versions and got.watermark == want.watermark
    for topic in want.topics:
        a, b = got.route_body(topic), want.route_body(topic)
        assert (a is None) == (b is None), topic
        if a is not None and b is not None:
            assert (a.standard, a.legacy) == (b.standard, b.legacy), topic
    assert got.route_count == want.route_count
    assert got.topic_list_body == want.topic_list_body
    assert got.cluster_info_body == want.cluster_info_body
    assert got.live_brokers_body == want.live_brokers_body
    assert got.system_topic_list_body == want.system_topic_list_body
    assert got.system_topics_body == want.system_topics_body
    assert dict(got.broker_topic_counts) == dict(want.broker_topic_counts)
    assert set(got.cluster_topics) == set(want.cluster_topics)
    for cluster in want.cluster_topics:
        assert got.topics_by_cluster_body(cluster) == want.topics_by_cluster_body(cluster)
    assert {ns: dict(kv) for ns, kv in got.kv.items()} == {
        ns: dict(kv) for ns, kv in want.kv.items()
    }


def rendered_as_objects(index: RouteIndex) -> None:
    for topic in index.topics:
        route, body = index.route(topic), index.route_body(topic)
        assert (route is None) == (body is None)
        if route is not None and body is not None:
            assert body.standard == jsonbody.standard(route), topic
            assert body.legacy == jsonbody.legacy(route), topic


# -- fragments joined = the route objects rendered --


def golden_tables(name: str) -> tuple[dict[str, list[Row]], int]:
    lines = (GOLDEN / name / "events.jsonl").read_text().splitlines()
    events = [parse_event(line) for line in lines]
    until = default_watermark(events, 10_000)
    return fleet_rows(replay(events, until).values()), until


@pytest.mark.parametrize("flags", FLAGS)
def test_fragments_equal_rendered_routes_on_golden_fixtures(flags):
    names = sorted(p.name for p in GOLDEN.iterdir() if (p / "events.jsonl").exists())
    for name in names:
        rows, until = golden_tables(name)
        rendered_as_objects(RouteIndex(WarehouseSnapshot(rows, {}, until), **flags))


@pytest.mark.parametrize("flags", FLAGS)
def test_fragments_equal_rendered_routes_by_hand(flags):
    rows = tables()
    rows[KV_CONFIG] = [
        {"namespace": ORDER_TOPIC_CONFIG, "key": "Orders", "value": "broker-a:8;broker-b:4"},
        {"namespace": ORDER_TOPIC_CONFIG, "key": "Half", "value": "broker-b:2 \u00e9"},
    ]
    rendered_as_objects(RouteIndex(WarehouseSnapshot(rows, {}, 1), **flags))


# -- incremental = full reload, over random histories --


class Model:
    """The tables as the job would hold them, and the row changes of one batch."""

    def __init__(self, rows: dict[str, list[Row]]) -> None:
        self.tables = {t: {key_of(t, r): r for r in rs} for t, rs in rows.items()}

    def rows(self) -> dict[str, list[Row]]:
        return {t: list(rs.values()) for t, rs in self.tables.items()}

    def apply(self, changes: dict[str, list[Change]]) -> None:
        for table, table_changes in changes.items():
            for op, row in table_changes:
                if op == "delete":
                    self.tables[table].pop(key_of(table, row), None)
                else:
                    self.tables[table][key_of(table, row)] = row


def random_batch(rng: random.Random, model: Model, step: int) -> dict[str, list[Change]]:
    changes: dict[str, list[Change]] = {}

    def add(table: str, op: str, row: Row) -> None:
        changes.setdefault(table, []).append((op, row))

    brokers = sorted({k[0] for k in model.tables[BROKER_ADDR]})
    for row in model.tables[BROKER_LIVE].values():  # liveness: every batch
        if rng.random() < 0.5:
            add(BROKER_LIVE, "upsert", {**row, "last_update_timestamp": 1_000 * step})
    kind = rng.choice(
        ["upsert", "delete", "expire", "addr_gone", "new_broker", "kv", "filter", "quiet"]
    )
    topics = list(model.tables[TOPIC_QUEUE].values())
    if kind == "upsert" and brokers:
        for _ in range(rng.randint(1, 5)):
            topic = rng.choice([*(r["topic"] for r in topics), f"New{step}"])
            add(TOPIC_QUEUE, "upsert", queue(topic, rng.choice(brokers), rng.choice([1, 2, 8])))
    elif kind == "delete" and topics:
        for row in rng.sample(topics, min(len(topics), rng.randint(1, 5))):
            add(TOPIC_QUEUE, "delete", row)
    elif kind == "expire" and brokers:
        # a group's last broker expires: its addresses, cluster entry, queues go
        name = rng.choice(brokers)
        for table in (BROKER_ADDR, CLUSTER_ADDR, BROKER_LIVE, TOPIC_QUEUE):
            for row in model.tables[table].values():
                if row["broker_name"] == name:
                    add(table, "delete", row)
    elif kind == "addr_gone" and brokers:
        # only the addresses go: topics still list the name (unroutable there until it comes
        # back), as in a hand-built table
        name = rng.choice(brokers)
        for row in model.tables[BROKER_ADDR].values():
            if row["broker_name"] == name:
                add(BROKER_ADDR, "delete", row)
    elif kind == "new_broker":
        listed = {r["broker_name"] for r in topics} - set(brokers)
        name = rng.choice(sorted(listed)) if listed and rng.random() < 0.5 else f"broker-n{step}"
        cluster = rng.choice(["c1", "c2"])
        address = f"127.9.0.{step % 250}:10911"
        add(BROKER_ADDR, "upsert", addr(name, rng.choice([0, 1]), address, cluster, acting=True))
        add(CLUSTER_ADDR, "upsert", {"cluster_name": cluster, "broker_name": name})
        add(BROKER_LIVE, "upsert", live(cluster, address, name))
        for topic in rng.sample(sorted({r["topic"] for r in topics} | {"Fresh"}), 3):
            add(TOPIC_QUEUE, "upsert", queue(topic, name, 4, perm=rng.choice([4, 6])))
    elif kind == "kv" and topics:
        topic = rng.choice(topics)["topic"]
        op = rng.choice(["upsert", "delete"])
        add(KV_CONFIG, op, {"namespace": ORDER_TOPIC_CONFIG, "key": topic, "value": f"v{step}"})
    elif kind == "filter" and model.tables[BROKER_ADDR]:
        row = rng.choice(list(model.tables[BROKER_ADDR].values()))
        servers = [] if rng.random() < 0.3 else [f"127.5.0.{step % 250}:30000"]
        add(
            FILTER_SERVER,
            "upsert",
            {
                "cluster_name": row["cluster"],
                "broker_addr": row["broker_addr"],
                "broker_name": row["broker_name"],
                "filter_server_list": servers,
            },
        )
    return {table: one_per_key(table, table_changes) for table, table_changes in changes.items()}


def start_rows() -> dict[str, list[Row]]:
    rows = fleet(5, 12, pool=20)
    rows[FILTER_SERVER] = []
    rows[KV_CONFIG] = []
    return rows


def written(root, model: Model) -> WriterWarehouse:
    """The model's tables, written as batch 0 (watermark 1 000) by the job's writer."""
    wh = WriterWarehouse(root)
    wh.publish(0, 1_000, group_layout(upserts(model.rows())))
    return wh


@pytest.mark.parametrize("seed", seeds([1, 2, 3, 4]))  # odd and even: both flag sets
def test_incremental_refresh_equals_full_reload(tmp_path, seed):
    rng = random.Random(seed)
    flags = FLAGS[seed % 2]
    model = Model(start_rows())
    wh = written(tmp_path, model)
    pinned, _ = settled_versions(tmp_path)
    built = next_index(tmp_path, None, pinned, **flags)
    assert built.how == "full"
    current = built.index
    kinds = set()
    for step in range(1, 11):
        changes = random_batch(rng, model, step)
        model.apply(changes)
        wh.publish(step, 1_000 + step, group_layout(changes))
        pinned, latest = settled_versions(tmp_path)
        assert pinned == latest
        before = {t: current.route_body(t) for t in current.topics}
        before_bytes = {t: b.standard for t, b in before.items() if b is not None}
        built = next_index(tmp_path, current, pinned, **flags)
        kinds.add(built.how)
        assert built.how == "incremental", built.reason
        same_answers(built.index, load_index(tmp_path, pinned, **flags))
        reference = RouteIndex(WarehouseSnapshot(model.rows(), pinned, 1_000 + step), **flags)
        same_answers(built.index, reference)
        # the served index is untouched by the build (copy on write)
        assert {t: current.route_body(t).standard for t in before_bytes} == before_bytes
        current = built.index
    assert kinds == {"incremental"}


def test_unchanged_topics_share_the_store_and_parts(tmp_path):
    model = Model(start_rows())
    wh = written(tmp_path, model)
    first = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    first.topics, first.route_count  # noqa: B018  computed once, then carried over
    beat = [("upsert", {**r, "last_update_timestamp": 5}) for r in model.rows()[BROKER_LIVE]]
    wh.publish(1, 2_000, {BROKER_LIVE: beat})
    built = next_index(tmp_path, first, settled_versions(tmp_path)[0])
    assert (built.how, built.changed_rows) == ("incremental", 0)
    second = built.index
    assert second.store is first.store  # a liveness-only batch touches no topic
    assert second.cluster_info_body is first.cluster_info_body
    assert second.topics is first.topics
    assert second.live_brokers_body != first.live_brokers_body
    assert second.watermark == 2_000


def test_overwrites_and_vacuumed_changes(tmp_path):
    # Tables written whole (no change-data files): the feed derives the changes from the
    # files a commit removed and added, and is exact for that too.
    wh = Warehouse(tmp_path)
    wh.publish(0, 1_000, tables())
    first = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    wh.publish(1, 2_000, {TOPIC_QUEUE: tables(orders_queues=2)[TOPIC_QUEUE]})
    pinned = settled_versions(tmp_path)[0]
    built = next_index(tmp_path, first, pinned)
    assert built.how == "incremental"
    same_answers(built.index, load_index(tmp_path, pinned))
    # Once VACUUM deleted the removed files, the feed cannot say what changed: a full load.
    # (VACUUM's own commits carry no txn: the pinned versions step over them.)
    wh.publish(2, 3_000, {TOPIC_QUEUE: tables(orders_queues=3)[TOPIC_QUEUE]})
    DeltaTable(str(tmp_path / TOPIC_BASE)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    pinned, latest = settled_versions(tmp_path)
    assert pinned == latest
    built = next_index(tmp_path, built.index, pinned)
    assert built.how == "full" and "change feed" in built.reason
    assert (
        json.loads(built.index.route_body("Orders").standard)["queueDatas"][0]["readQueueNums"] == 3
    )


def test_a_large_change_rebuilds_the_base_index(tmp_path):
    model = Model(start_rows())
    wh = written(tmp_path, model)
    first = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    rows = model.rows()[TOPIC_QUEUE]
    wh.publish(1, 2_000, group_layout({TOPIC_QUEUE: [("delete", r) for r in rows[:3]]}))
    pinned = settled_versions(tmp_path)[0]
    built = next_index(tmp_path, first, pinned, max_change_fraction=0.5, min_full_rows=0)
    # a small change: a delta over the base index it had
    assert built.index.store.base is first.store.base
    assert 1 <= len(built.index.store.delta) <= 3  # the topics of three (topic, broker) rows
    wh.publish(2, 3_000, group_layout({TOPIC_QUEUE: [("delete", r) for r in rows[3:]]}))
    pinned = settled_versions(tmp_path)[0]
    second = next_index(tmp_path, built.index, pinned, max_change_fraction=0.5, min_full_rows=0)
    assert second.how == "incremental"
    # a large one: a base index at the new version, no delta
    base = second.index.store.base
    assert base.version == pinned[TOPIC_BASE] and len(second.index.store.delta) == 0
    assert second.index.topics == () and second.index.route_count == 0
    same_answers(second.index, load_index(tmp_path, pinned))


def test_pinned_versions_leave_out_a_batch_in_flight(tmp_path):
    model = Model(start_rows())
    wh = written(tmp_path, model)
    published, _ = settled_versions(tmp_path)
    row = model.rows()[TOPIC_QUEUE][0]
    wh.merge(TOPIC_BASE, [("upsert", {**row, "read_queue_nums": 99})], batch=1)
    wh.merge(BROKER_LIVE, [("upsert", model.rows()[BROKER_LIVE][0])], batch=1)
    pinned, latest = settled_versions(tmp_path)
    assert pinned == published and latest[TOPIC_BASE] == published[TOPIC_BASE] + 1
    index = next_index(tmp_path, None, pinned).index
    assert b'"readQueueNums":99' not in index.route_body(row["topic"]).standard
    wh.progress(1, 2_000)
    pinned, latest = settled_versions(tmp_path)
    assert pinned == latest
    index = next_index(tmp_path, index, pinned).index
    assert b'"readQueueNums":99' in index.route_body(row["topic"]).standard


def test_a_request_during_a_swap_sees_one_snapshot(tmp_path):
    """A reader holds the index it took; the refresher builds the next one from it at the
    same time. Every answer the reader gets is the old snapshot's, whole."""
    model = Model(start_rows())
    wh = written(tmp_path, model)
    old = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    topics = [t for t in old.topics if old.route_body(t) is not None]
    expected = {t: old.route_body(t).standard for t in topics}
    changes = {TOPIC_QUEUE: [("upsert", {**r, "perm": 2}) for r in model.rows()[TOPIC_QUEUE]]}
    wh.publish(1, 2_000, group_layout(changes))
    held = old  # what a request took from holder.current
    new = next_index(tmp_path, held, settled_versions(tmp_path)[0]).index
    assert {t: held.route_body(t).standard for t in topics} == expected
    assert all(b'"perm":2' in new.route_body(t).standard for t in topics)
    assert all(b'"perm":2' not in expected[t] for t in topics)
    assert held.watermark == 1_000 and new.watermark == 2_000


def test_hand_built_snapshot_unchanged_by_the_store():
    index = RouteIndex(snapshot())
    assert index.store.row_count == len(tables()[TOPIC_QUEUE])
    assert index.topic_count == len({r["topic"] for r in tables()[TOPIC_QUEUE]})
    assert index.versions[PROGRESS] == 7


@pytest.mark.parametrize("big", [False, True])
def test_base_index_from_arrow_columns_equals_store_from_rows(big):
    """The vectorised base index (sorted, run-end and dictionary encoded) holds the same
    entries as a store built row by row, also for queue settings beyond 16 bits, and
    finds exactly the topics it holds."""
    rng = random.Random(5)
    rows = {}
    for _ in range(400):
        topic, broker = f"T{rng.randint(0, 60)}", f"b{rng.randint(0, 9)}"
        rows[topic, broker] = queue(topic, broker, rng.choice([1, 8, 70_000 if big else 16]))
    table = pa.Table.from_pylist(list(rows.values()), schema=arrow_schema(TOPIC_QUEUE))
    base = BaseIndex.build(table, 3)
    from_rows = TopicStore.of_rows(rows.values())
    assert {base.topic_name(i): base.entry(i) for i in range(base.topic_count)} == dict(
        from_rows.items()
    )
    assert [base.find(t) for t in base.topic_names()] == list(range(base.topic_count))
    assert base.find("T999") == base.find("") == base.find("\ud800") == -1
    topics = RouteTopics.of(base)
    assert (len(topics), topics.row_count) == (len(from_rows), len(rows))
    assert len(RouteTopics.of(BaseIndex.build(table.slice(0, 0), 0))) == 0
