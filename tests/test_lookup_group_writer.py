"""End to end without Spark: the shipped step and the job's Delta writer (bench/fault_writer.py,
as the job's foreachBatch commits) write the group layout, and the lookup, reading topic_base +
topic_overlay incrementally, answers exactly as an index of the topic_queue_table the writer
derived for analysts, after every batch of faults (issue 36): expiry, return with the same
table, admin WIPE/ADD, a topic change, an unregister."""

from __future__ import annotations

from pathlib import Path

from bench.fault_writer import FaultWarehouse, master_registration
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.routes import RouteIndex
from routing_lib.lookup.snapshots import next_index
from routing_lib.read.warehouse import WarehouseSnapshot, load_snapshot
from tests.test_lookup_snapshots import same_answers

BIG, SMALL = "big", "small"
ADDRESSES = {BIG: "10.0.0.1:10911", SMALL: "10.0.0.2:10911"}


def register(at: int, group: str, topics: int, perm: dict[str, int] | None = None) -> dict:
    return master_registration(at, group, ADDRESSES[group], topics, perm)


def test_the_lookup_over_the_writers_group_layout_equals_the_derived_table(tmp_path: Path):
    warehouse = FaultWarehouse(tmp_path)
    current: RouteIndex | None = None
    beat = [register(0, SMALL, 40)]

    def at(ms: int) -> list[dict]:
        return [{**e, "eventTime": ms} for e in beat]

    batches = [
        ([register(1_000, BIG, 500), register(1_000, SMALL, 40)], 1_000, "registrations"),
        (at(20_000), 20_000, "heartbeat"),
        (at(40_000), 40_000, "expiry"),  # big sent nothing for 39 s
        ([register(40_001, BIG, 500), *at(40_001)], 40_001, "return"),
        (
            [{"eventType": "WIPE_WRITE_PERM", "eventTime": 41_000, "brokerName": BIG}],
            41_000,
            "wipe",
        ),
        ([{"eventType": "ADD_WRITE_PERM", "eventTime": 42_000, "brokerName": BIG}], 42_000, "add"),
        ([register(43_000, SMALL, 40, {"topic-00007": 4, "topic-new": 6})], 43_000, "topics"),
        (
            [
                {
                    "eventType": "UNREGISTER",
                    "eventTime": 44_000,
                    "clusterName": "C",
                    "brokerAddr": ADDRESSES[BIG],
                    "brokerName": BIG,
                    "brokerId": 0,
                }
            ],
            44_000,
            "unregister",
        ),
    ]
    for records, until, what in batches:
        warehouse.batch(records, until)
        pinned, latest = settled_versions(tmp_path)
        assert pinned == latest, what
        built = next_index(tmp_path, current, pinned)
        assert built.how == ("full" if current is None else "incremental"), (what, built.reason)
        derived = load_snapshot(tmp_path)  # topic_queue_table as the writer derived it
        reference = RouteIndex(WarehouseSnapshot(derived.tables, pinned, derived.watermark))
        same_answers(built.index, reference)
        if what in ("expiry", "return", "wipe", "add", "unregister"):
            # a fault of the 500-topic group: its overlay row, no base row, no entry rebuilt
            assert (built.changed_rows, built.changed_groups) == (0, 1), what
            assert built.index.store.base is current.store.base, what
        current = built.index
    assert current is not None and not any(t.startswith("topic-004") for t in current.topics)
