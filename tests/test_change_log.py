"""read_log_changes (routing_lib/read/change_log.py): the change feed read from the commit
files and Parquet files equals delta-rs' `load_cdf`, row for row and column for column, on
tables the job's writers write (MERGE with change data, group files added and removed,
appends, overwrites, compaction), and it leaves to delta-rs what it cannot certainly answer."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from bench.fault_writer import FaultWarehouse, master_registration
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.read.change_log import read_log_changes
from routing_lib.read.warehouse import read_changes

FEED_ON = {"delta.enableChangeDataFeed": "true"}


def delta_rs_changes(location: Path, first: int, last: int) -> pa.Table:
    table = DeltaTable(str(location), version=last)
    return pa.table(table.load_cdf(starting_version=first, ending_version=last).read_all())


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: sorted((k, repr(v)) for k, v in r.items()))


def assert_same_feed(location: Path, first: int, last: int) -> None:
    mine = read_log_changes(DeltaTable(str(location), version=last), str(location), first, last)
    assert mine is not None, f"{location.name} {first}..{last} left to delta-rs"
    reference = delta_rs_changes(location, first, last)
    assert mine.column_names == reference.column_names
    assert sorted_rows(mine) == sorted_rows(reference), f"{location.name} {first}..{last}"


def every_range(location: Path, first: int = 1) -> None:
    last = DeltaTable(str(location)).version()
    for start in range(first, last + 1):
        for end in range(start, last + 1):
            assert_same_feed(location, start, end)


def test_the_group_writers_tables_read_as_delta_rs_reads_them(tmp_path: Path):
    """topic_base and topic_overlay as the job's writer commits them: registrations, an
    expiry, a return, a topic change (a group's files replaced)."""
    warehouse = FaultWarehouse(tmp_path)
    big = master_registration(1_000, "big", "10.0.0.1:10911", 60)
    small = master_registration(1_000, "small group", "10.0.0.2:10911", 8)  # not a path's name
    warehouse.batch([big, small], 1_000)
    warehouse.batch([{**small, "eventTime": 20_000}], 20_000)
    warehouse.batch([{**small, "eventTime": 40_000}], 40_000)  # big expires
    warehouse.batch([{**big, "eventTime": 40_001}, {**small, "eventTime": 40_001}], 40_001)
    changed = master_registration(43_000, "small group", "10.0.0.2:10911", 8, {"topic-new": 6})
    warehouse.batch([changed], 43_000)
    for table in (TOPIC_BASE, TOPIC_OVERLAY):
        assert DeltaTable(str(tmp_path / table)).version() >= 2, table
        every_range(tmp_path / table)


def test_partitioned_merges_overwrites_and_compaction(tmp_path: Path):
    """Random MERGE upserts and deletes (change-data files), overwrites of a partition by
    predicate, appends, and a compaction (no data change: no rows)."""
    rng = random.Random(5)
    path = tmp_path / "t"
    # names a path holds as they are: delta-rs cannot read its own change files of "g a" or
    # "g=c" (the job writes such groups' files under a folder of its own: group_files.py)
    groups = ["plain", "b.2", "c-3_x"]

    def rows(n: int, group: str | None = None) -> pa.Table:
        keys = [f"k{rng.randrange(40)}" for _ in range(n)]
        return (
            pa.table(
                {
                    "k": keys,
                    "g": [group or rng.choice(groups) for _ in keys],
                    "v": pa.array([rng.randrange(100) for _ in keys], pa.int32()),
                }
            )
            .group_by(["k", "g"])
            .aggregate([("v", "max")])
            .rename_columns(["k", "g", "v"])
        )

    write_deltalake(str(path), rows(30), partition_by=["g"], configuration=FEED_ON)
    for step in range(10):
        table = DeltaTable(str(path))
        kind = step % 4
        if kind == 0:
            merge = table.merge(rows(8), "s.k = t.k AND s.g = t.g", "s", "t")
            merge.when_matched_update_all().when_not_matched_insert_all().execute()
        elif kind == 1:
            table.delete(f"k = 'k{rng.randrange(40)}'")
        elif kind == 2:
            group = rng.choice(groups)
            write_deltalake(str(path), rows(5, group), mode="overwrite", predicate=f"g = '{group}'")
        else:
            write_deltalake(str(path), rows(3), mode="append")
    DeltaTable(str(path)).optimize.compact()
    every_range(path)


def test_what_it_cannot_answer_is_left_to_delta_rs(tmp_path: Path):
    path = tmp_path / "t"
    data = pa.table({"k": pa.array([1, 2], pa.int64())})
    write_deltalake(str(path), data, configuration=FEED_ON)  # 0
    write_deltalake(str(path), data, mode="append")  # 1
    DeltaTable(str(path)).alter.set_table_properties({"delta.appendOnly": "false"})  # 2
    write_deltalake(str(path), data, mode="append")  # 3

    def answer(first: int, last: int) -> pa.Table | None:
        return read_log_changes(DeltaTable(str(path), version=last), str(path), first, last)

    assert answer(1, 1) is not None and answer(3, 3) is not None
    assert answer(1, 3) is None  # commit 2 changes the metadata: the feed may change there
    for added in path.glob("part-*.parquet"):
        added.unlink()
    assert answer(3, 3) is None  # a vacuumed or lost data file: delta-rs names the fault
    assert read_log_changes(DeltaTable(str(path)), "s3://bucket/t", 3, 3) is None


def test_read_changes_answers_without_delta_rs_query_engine(tmp_path: Path, caplog):
    """The lookup's reads of the writer's tables are answered from the log, not by load_cdf
    (its query engine's pages are what the lookup's RSS grew by after the load)."""
    warehouse = FaultWarehouse(tmp_path)
    warehouse.batch([master_registration(1_000, "b", "10.0.0.1:10911", 5)], 1_000)
    warehouse.batch([master_registration(2_000, "b", "10.0.0.1:10911", 6)], 2_000)
    last = DeltaTable(str(tmp_path / TOPIC_BASE)).version()
    with caplog.at_level(logging.DEBUG, logger="routelake.read"):
        changes = read_changes(tmp_path, TOPIC_BASE, 1, last)
        assert not [r for r in caplog.records if "left to delta-rs" in r.getMessage()]
        read_changes(tmp_path, TOPIC_BASE, 0, last)  # commit 0 holds the metadata
        assert [r for r in caplog.records if "left to delta-rs" in r.getMessage()]
    assert sorted_rows(changes) == sorted_rows(delta_rs_changes(tmp_path / TOPIC_BASE, 1, last))


@pytest.mark.parametrize("first,last", [(0, 0), (0, 1)])
def test_the_first_commit_is_read_too(tmp_path: Path, first: int, last: int):
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"k": [1, 2]}), configuration=FEED_ON)
    write_deltalake(str(path), pa.table({"k": [3]}), mode="append")
    mine = read_log_changes(DeltaTable(str(path), version=last), str(path), first, last)
    # version 0 holds the table's metadata: whether the feed was on before it is delta-rs' call
    assert mine is None
    assert sorted_rows(read_changes(tmp_path, "t", first, last)) == sorted_rows(
        delta_rs_changes(path, first, last)
    )
