"""read_changes: which delta-rs errors mean "the change feed cannot cover this range" (the
lookup then reloads the table whole) and which are faults that must surface. Every case is a
real table written with deltalake, in the state the case names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError

from routing_lib.core.catalog import TOPIC_BASE
from routing_lib.core.tables import TOPIC_QUEUE
from routing_lib.lookup.consistency import settled_versions
from routing_lib.lookup.snapshots import next_index
from routing_lib.read.warehouse import ChangesUnavailableError, read_changes
from tests.support.lookup_support import queue
from tests.support.snapshot_support import group_layout
from tests.support.writer_support import WriterWarehouse, last_commit_files

FEED_ON = {"delta.enableChangeDataFeed": "true"}
TABLE = "t"


def rows(keys: range) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array([f"v{k}" for k in keys])})


def upsert(path: Path, keys: range) -> None:
    merge = DeltaTable(str(path)).merge(rows(keys), "s.k = t.k", source_alias="s", target_alias="t")
    merge.when_matched_update_all().when_not_matched_insert_all().execute()


def set_feed(path: Path, on: bool) -> None:
    feed = {"delta.enableChangeDataFeed": str(on).lower()}
    DeltaTable(str(path)).alter.set_table_properties(feed)


def feed_off_inside(path: Path) -> tuple[int, int]:
    write_deltalake(str(path), rows(range(3)), configuration=FEED_ON)  # 0
    upsert(path, range(2, 4))  # 1
    set_feed(path, False)  # 2
    upsert(path, range(3, 5))  # 3
    return 1, 3


def starts_before_the_feed(path: Path) -> tuple[int, int]:
    write_deltalake(str(path), rows(range(3)))  # 0: no feed
    set_feed(path, True)  # 1
    upsert(path, range(2, 4))  # 2
    return 0, 2


def commits_cleaned_up(path: Path) -> tuple[int, int]:
    config = {**FEED_ON, "delta.logRetentionDuration": "interval 0 seconds"}
    write_deltalake(str(path), rows(range(3)), configuration=config)  # 0
    for n in range(1, 4):
        upsert(path, range(n, n + 2))  # 1..3
    DeltaTable(str(path)).create_checkpoint()
    upsert(path, range(8, 10))  # 4
    DeltaTable(str(path)).cleanup_metadata()  # commits 0..2 go: the checkpoint of 3 holds them
    return 1, 4


def files_vacuumed(path: Path) -> tuple[int, int]:
    write_deltalake(str(path), rows(range(3)), configuration=FEED_ON)  # 0
    write_deltalake(str(path), rows(range(3, 5)), mode="append")  # 1
    DeltaTable(str(path)).optimize.compact()  # 2: both files rewritten as one
    DeltaTable(str(path)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return 1, 1  # the file version 1 added is gone


NO_FEED_CASES: dict[str, Callable[[Path], tuple[int, int]]] = {
    "feed off inside the range": feed_off_inside,
    "range starts before the feed": starts_before_the_feed,
    "commits cleaned up": commits_cleaned_up,
    "files vacuumed": files_vacuumed,
}


@pytest.mark.parametrize("case", list(NO_FEED_CASES))
def test_a_range_the_feed_cannot_cover_is_unavailable(tmp_path, case):
    first, last = NO_FEED_CASES[case](tmp_path / TABLE)
    with pytest.raises(ChangesUnavailableError):
        read_changes(tmp_path, TABLE, first, last)


def test_a_range_the_feed_covers_is_read(tmp_path):
    write_deltalake(str(tmp_path / TABLE), rows(range(3)), configuration=FEED_ON)
    upsert(tmp_path / TABLE, range(2, 4))
    changes = read_changes(tmp_path, TABLE, 1, 1).to_pylist()
    assert sorted((c["k"], c["_change_type"]) for c in changes) == [
        (2, "update_postimage"),
        (2, "update_preimage"),
        (3, "insert"),
    ]


def test_other_errors_surface(tmp_path):
    write_deltalake(str(tmp_path / TABLE), rows(range(3)), configuration=FEED_ON)
    upsert(tmp_path / TABLE, range(2, 4))
    with pytest.raises(ValueError, match="no version range"):  # a caller's bug
        read_changes(tmp_path, TABLE, 2, 1)
    with pytest.raises(DeltaError, match="end version"):  # a version the table never had
        read_changes(tmp_path, TABLE, 1, 9)
    with pytest.raises(TableNotFoundError):
        read_changes(tmp_path, "no_such_table", 1, 1)
    with pytest.raises(TypeError):
        read_changes(tmp_path, TABLE, "1", 1)  # type: ignore[arg-type]


def test_the_lookup_reloads_without_a_feed_and_fails_on_a_fault(tmp_path):
    """next_index falls back to a full load for a range the feed cannot cover; a change-data
    file it cannot read (truncated by a storage fault) is an error, not a silent full load."""
    warehouse = WriterWarehouse(tmp_path)
    warehouse.publish(0, 1_000, group_layout({TOPIC_QUEUE: [("upsert", queue("A", "b", 4))]}))
    first = next_index(tmp_path, None, settled_versions(tmp_path)[0]).index
    set_feed(tmp_path / TOPIC_BASE, False)
    warehouse.publish(1, 2_000, group_layout({TOPIC_QUEUE: [("upsert", queue("B", "b", 4))]}))
    built = next_index(tmp_path, first, settled_versions(tmp_path)[0])
    assert built.how == "full" and "no change feed" in built.reason
    assert built.index.topics == ("A", "B")

    set_feed(tmp_path / TOPIC_BASE, True)
    warehouse.publish(2, 3_000, group_layout({TOPIC_QUEUE: [("upsert", queue("A", "b", 8))]}))
    [change_file] = [
        f for f in last_commit_files(tmp_path / TOPIC_BASE) if "_change_data" in f.parts
    ]
    change_file.write_bytes(change_file.read_bytes()[:20])
    with pytest.raises(Exception, match="Parquet error"):
        next_index(tmp_path, built.index, settled_versions(tmp_path)[0])
