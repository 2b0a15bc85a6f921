"""The console's parts without a browser: topic search, liveness intervals, buckets, and
pinning history tables to a published batch (a Delta warehouse written with delta-rs)."""

from __future__ import annotations

import random
import threading

import httpx
import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from routing_lib.console import timing
from routing_lib.console.fleet import WriteCounts, fleet, write_counts
from routing_lib.console.pins import TableCache, pin_versions
from routing_lib.console.search import TopicNames
from routing_lib.console.timelines import buckets, liveness_intervals
from routing_lib.core.catalog import TOPIC_BASE_CHANGES, TOPIC_ROUTE_HISTORY
from routing_lib.core.history import BROKER_LIVENESS_EVENTS
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.topic_store import TopicStore, entry_of, queue_of
from tests.support.lookup_support import (
    APP_ID,
    ServerThread,
    Warehouse,
    arrow_schema,
    snapshot,
    tables,
    wait_until,
)


def _expected(names: list[str], query: str, limit: int) -> list[str]:
    key = query.casefold()
    ordered = sorted(names, key=lambda n: (n.casefold(), n))
    prefix = [n for n in ordered if n.casefold().startswith(key)]
    inner = [n for n in ordered if key in n.casefold() and not n.casefold().startswith(key)]
    return (prefix + inner)[:limit]


def test_search_prefix_first_then_substring_in_order():
    names = ["Orders", "orders-eu", "EUorders", "Billing", "rmq_sys_orders", "ORD", "x"]
    result = TopicNames(names).search("ord", limit=10)
    assert result.names == ["ORD", "Orders", "orders-eu", "EUorders", "rmq_sys_orders"]
    assert result.prefix_count == 3 and not result.more


def test_search_matches_a_plain_scan_on_random_names():
    rng = random.Random(7)
    alphabet = "abAB_-%|1ü"
    names = list({"".join(rng.choices(alphabet, k=rng.randint(1, 8))) for _ in range(3000)})
    index = TopicNames(names)
    for query in ["", "a", "Ab", "b_", "ü1", "zz", "%|", "-"] + rng.sample(names, 20):
        for limit in (1, 5, 100):
            result = index.search(query, limit)
            expected = _expected(names, query, limit + 1)
            assert result.names == expected[:limit], (query, limit)
            assert result.more == (len(expected) > limit), (query, limit)


def test_search_never_matches_across_two_names():
    index = TopicNames(["ab", "cd"])
    assert index.search("bc").names == [] and index.search("b\nc").names == []


def _event(t: int, kind: str, addr: str = "a:1", seq: int = 0) -> dict:
    return {
        "cluster_name": "C",
        "broker_addr": addr,
        "event_time": t,
        "seq": seq,
        "event_type": kind,
        "broker_id": 0,
    }


def test_liveness_intervals_end_with_their_cause():
    events = [
        _event(30, "EXPIRED"),
        _event(10, "REGISTERED"),
        _event(40, "REGISTERED"),
        _event(50, "UNREGISTERED"),
        _event(60, "REGISTERED"),
        _event(15, "REGISTERED", addr="b:1"),
    ]
    spans = [(i["addr"], i["from"], i["to"], i["end"]) for i in liveness_intervals(events)]
    assert spans == [
        ("a:1", 10, 30, "EXPIRED"),
        ("a:1", 40, 50, "UNREGISTERED"),
        ("a:1", 60, None, None),
        ("b:1", 15, None, None),
    ]


def test_buckets_count_every_time_once():
    times = [0, 1, 50, 99, 100]
    slots = buckets(times, 0, 100, count=4)
    assert sum(b["n"] for b in slots) == len(times) and len(slots) == 4
    assert slots[0]["from"] == 0 and slots[-1]["to"] >= 100


def test_history_tables_are_pinned_to_the_published_batch(tmp_path):
    """The writer commits a batch's tables, then its progress row: a table already showing
    the next batch is read at the version before it."""
    root = tmp_path / "warehouse"
    writer = Warehouse(root)
    events = root / BROKER_LIVENESS_EVENTS
    schema = arrow_schema(BROKER_LIVENESS_EVENTS)

    def liveness(batch: int) -> None:
        rows = pa.Table.from_pylist([], schema=schema)
        commit = CommitProperties(app_transactions=[Transaction(APP_ID, batch)])
        write_deltalake(events, rows, mode="append", commit_properties=commit)

    liveness(0)
    writer.progress(0, 1000)
    liveness(1)
    writer.progress(1, 2000)
    liveness(2)  # batch 2 is half written: its progress row is not there yet
    assert pin_versions(root, 1)[BROKER_LIVENESS_EVENTS] == 1
    assert pin_versions(root, 0)[BROKER_LIVENESS_EVENTS] == 0
    assert pin_versions(root, 1)[TOPIC_BASE_CHANGES] is None  # absent: read as empty
    # derived when read (from the change tables, pinned instead): never pinned itself
    assert TOPIC_ROUTE_HISTORY not in pin_versions(root, 1)
    writer.progress(2, 3000)
    assert pin_versions(root, 2)[BROKER_LIVENESS_EVENTS] == 2


def test_fleet_lists_every_broker_with_liveness_and_write_counts():
    index = RouteIndex(snapshot())
    live = {(b["clusterName"], b["brokerAddr"]): b for b in index.live_brokers}
    view = fleet(index, live, {("ClusterA", "10.0.0.1:10911"): 5})
    rows = {
        b["addr"]: (
            c["name"],
            g["name"],
            b["role"],
            b["live"],
            b["aliveSince"],
            g["writableTopics"],
        )
        for c in view["clusters"]
        for g in c["groups"]
        for b in g["brokers"]
    }
    assert rows["10.0.0.1:10911"] == ("ClusterA", "broker-a", "master", True, 5, 2)
    assert rows["10.0.0.2:10911"] == ("ClusterA", "broker-a", "slave", False, None, 2)
    assert rows["10.0.2.1:10911"] == ("ClusterB", "broker-c", "slave", True, None, 1)
    assert len(rows) == 6 and view["counts"]["liveBrokers"] == 3
    assert view["counts"]["topics"] == len(index.topics)


def _server_timing(header: str) -> dict[str, str]:
    """Server-Timing entries by name: the rest of each entry (`dur=...;desc=...`)."""
    return dict((item.split(";", 1) + [""])[:2] for item in header.split(", "))


def test_server_timing_tells_the_reads_this_answer_did_from_cache_hits(tmp_path):
    root = tmp_path / "warehouse"
    for table in (BROKER_LIVENESS_EVENTS, TOPIC_BASE_CHANGES):
        write_deltalake(root / table, pa.Table.from_pylist([], schema=arrow_schema(table)))
    cache = TableCache(root)

    def another_answer() -> None:  # its read is its own, not the first answer's
        with timing.tally():
            cache.get(TOPIC_BASE_CHANGES, 0)

    with timing.tally() as first:
        cache.get(BROKER_LIVENESS_EVENTS, 0)
        worker = threading.Thread(target=another_answer)
        worker.start()
        worker.join()
        with timing.part("fleet"):
            pass
    parts = _server_timing(first.header())
    assert set(parts) == {"total", "delta", "fleet"}
    assert parts["delta"].endswith('desc="1"') and cache.reads == 2
    with timing.tally() as again:
        cache.get(BROKER_LIVENESS_EVENTS, 0)  # the same version: from the cache
    parts = _server_timing(again.header())
    assert set(parts) == {"total", "cache"} and parts["cache"] == 'desc="hit"'
    with timing.part("delta"):  # outside an answer: recorded nowhere, no error
        pass


def test_write_counts_carried_across_stores_equal_a_fresh_count():
    """Stores replaced a few topics at a time (added, changed, dropped), and once wholesale
    (every entry a new object, as after a full reload): the carried counts equal a count of
    the whole store every time."""
    rng = random.Random(11)
    groups = [f"broker-{g}" for g in range(12)]
    queues = [queue_of(8, 8, perm, 0) for perm in (2, 4, 6)]

    def entry(k: int):  # k groups, one perm on all (as usual) or each its own
        same = rng.choice(queues) if rng.random() < 0.5 else None
        return entry_of({g: same or rng.choice(queues) for g in rng.sample(groups, k)})

    def counted(store: TopicStore) -> dict[str, tuple[int, int]]:  # a pair at a time
        counts: dict[str, tuple[int, int]] = {}
        for _, e in store.items():
            for name, queue in zip(e[0::2], e[1::2], strict=True):
                n, w = counts.get(name, (0, 0))
                counts[name] = (n + 1, w + bool(queue[2] & 2))
        return counts

    store = TopicStore.build([])
    store = store.replaced({f"T{t}": entry(rng.randint(1, 12)) for t in range(300)})
    carried = WriteCounts()
    for step in range(40):
        if step == 20:
            changes = {t: entry(rng.randint(1, 12)) for t in store}
        else:
            changes = {f"T{rng.randrange(330)}": entry(rng.randint(0, 12)) for _ in range(5)}
        store = store.replaced(changes)
        fresh = counted(store)
        assert carried.of(store) == fresh
        assert {name: c for name, c in write_counts(store).items() if c[0]} == fresh


def test_the_served_snapshot_s_fleet_is_made_before_a_page_asks(tmp_path):
    """The lookup prepares each new snapshot's fleet in the background: the first page asking
    for it builds nothing (its Server-Timing has no fleet part)."""
    wh = Warehouse(tmp_path)
    wh.publish(0, 1_000, tables())
    with ServerThread(tmp_path) as server:
        console = server.service.console
        assert console is not None
        wait_until(lambda: console.warmed is not None, 10)
        answer = httpx.get(f"http://127.0.0.1:{server.service.http_port}/console/api/fleet")
        assert answer.json()["status"] == "ok"
        assert "fleet" not in _server_timing(answer.headers["Server-Timing"])
        wh.publish(1, 2_000, tables(orders_queues=4))  # the next batch: prepared too
        wait_until(lambda: console.warmed is server.service.holder.current, 10)
        wait_until(lambda: console.warmed.index.watermark == 2_000, 10)
        answer = httpx.get(f"http://127.0.0.1:{server.service.http_port}/console/api/fleet")
        assert answer.json()["snapshot"]["watermark"] == 2_000
        assert "fleet" not in _server_timing(answer.headers["Server-Timing"])


def test_prepared_tables_are_made_once_per_version(tmp_path):
    """The change tables' next-change column (State(T) at any T is then a mask) is computed
    once per table version, like the read itself."""
    root = tmp_path / "warehouse"
    write_deltalake(root / TOPIC_BASE_CHANGES, arrow_schema(TOPIC_BASE_CHANGES).empty_table())
    cache = TableCache(root)
    made = []

    def prepare(table: pa.Table) -> pa.Table:
        made.append(table.num_rows)
        return table.append_column("n", pa.array([], pa.int64()))

    first = cache.prepared(TOPIC_BASE_CHANGES, 0, prepare)
    assert first is not None and "n" in first.column_names
    assert cache.prepared(TOPIC_BASE_CHANGES, 0, prepare) is first
    assert made == [0] and cache.reads == 1
    assert cache.prepared(TOPIC_BASE_CHANGES, None, prepare) is None
