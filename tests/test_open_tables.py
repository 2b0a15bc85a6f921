"""OpenTables: a reader's Delta tables kept open and moved forward (the lookup's refresher).
Its latest versions, found by the stat of the next commit files, are delta-rs' own as
commits come, as a table is replaced, as one appears; a table moved forward reads as one
opened at that version. Real tables, written with delta-rs."""

from __future__ import annotations

import shutil

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from routing_lib.read.open_tables import OpenTables

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def append(path, *keys: int) -> None:
    rows = pa.table({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)
    write_deltalake(str(path), rows, mode="append")


def opener(path):
    def open_latest() -> DeltaTable | None:
        opened.append(1)
        return DeltaTable(str(path)) if (path / "_delta_log").is_dir() else None

    opened: list[int] = []
    return open_latest, opened


def test_latest_follows_the_commit_files_and_asks_delta_rs_when_they_are_not_its(tmp_path):
    path = tmp_path / "t"
    tables = OpenTables(tmp_path)
    open_latest, opened = opener(path)
    assert tables.latest("t", open_latest) is None  # not there yet
    append(path, 1)
    assert tables.latest("t", open_latest) == 0 and len(opened) == 2
    append(path, 2)
    append(path, 3)
    assert tables.latest("t", open_latest) == 2 == DeltaTable(str(path)).version()
    assert len(opened) == 2  # found by stats, not opened
    # the table replaced: removed and written again, to as many commits and one more
    shutil.rmtree(path)
    for k in range(4):
        append(path, k)
    assert tables.latest("t", open_latest) == 3 and len(opened) == 3  # another commit 2
    shutil.rmtree(path)
    assert tables.latest("t", open_latest) is None
    tables.forget()
    append(path, 9)
    assert tables.latest("t", open_latest) == 0


def test_a_table_moved_forward_reads_as_one_opened_at_that_version(tmp_path):
    path = tmp_path / "t"
    for k in range(5):
        append(path, k)
    tables = OpenTables(tmp_path)
    first = tables.at("t", 1)
    for version in (1, 3, 4, 2, 4):  # forward, then back (opened afresh), then forward
        held = tables.at("t", version)
        assert held.version() == version
        fresh = DeltaTable(str(path), version=version).to_pyarrow_table().sort_by("k")
        assert held.to_pyarrow_table().sort_by("k") == fresh
    assert tables.at("t", 4) is not first  # the one moved back was opened afresh
