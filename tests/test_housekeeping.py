"""Housekeeping (OPTIMIZE + VACUUM with delta-rs) on small Delta tables written in many
commits: fewer files, same rows. No Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from routing_lib.cli import main as routectl
from routing_lib.core.history import BROKER_LIVENESS_EVENTS as DAY_TABLE
from routing_lib.core.tables import PROGRESS, TOPIC_QUEUE
from routing_lib.housekeeping import (
    DEFAULT_VACUUM_HOURS,
    WAREHOUSE_TABLES,
    housekeep,
    partition_filters,
)

CDF = {"delta.enableChangeDataFeed": "true"}  # as the job creates its tables
DAYS = ("2025-11-24", "2025-11-25")
# DAY_TABLE: a history table partitioned by day (topic_route_history, the one used before, is
# derived since issue 36 and has no files to compact)


def _write(path: Path, batches: list[dict], partition_by: list[str] | None = None) -> None:
    for batch in batches:  # one commit, one or more files each
        write_deltalake(
            str(path), pa.table(batch), mode="append", partition_by=partition_by, configuration=CDF
        )


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    root = tmp_path / "warehouse"
    _write(
        root / TOPIC_QUEUE,
        [
            {
                "topic": [f"T{i}", f"U{i}"],
                "broker_name": ["broker-a", "broker-b"],
                "perm": pa.array([6, 4], pa.int32()),
            }
            for i in range(5)
        ],
    )
    _write(
        root / PROGRESS, [{"batch_id": [i], "watermark": [1_764_000_000_000 + i]} for i in range(4)]
    )
    _write(
        root / DAY_TABLE,
        [
            {"topic": [f"T{i}"], "valid_from": [1_764_000_000_000 + i], "event_date": [day]}
            for day in DAYS
            for i in range(3)
        ],
        partition_by=["event_date"],
    )
    return root


def _parquet_on_disk(table: Path) -> int:
    return sum(1 for _ in table.rglob("*.parquet"))


def _rows(table: Path) -> list[tuple]:
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    return sorted(tuple(sorted(r.items())) for r in rows)


def _state(root: Path) -> dict[str, tuple[int, int, list[tuple]]]:
    tables = (TOPIC_QUEUE, PROGRESS, DAY_TABLE)
    return {
        t: (len(DeltaTable(str(root / t)).file_uris()), _parquet_on_disk(root / t), _rows(root / t))
        for t in tables
    }


def test_optimize_and_vacuum_shrink_files_and_keep_rows(warehouse):
    before = _state(warehouse)
    reports = {
        r.table: r for r in housekeep(warehouse, vacuum_hours=0, disable_retention_check=True)
    }
    after = _state(warehouse)
    assert set(reports) == set(WAREHOUSE_TABLES)
    assert (before[TOPIC_QUEUE][0], after[TOPIC_QUEUE][0]) == (5, 1)
    assert (before[PROGRESS][0], after[PROGRESS][0]) == (4, 1)
    assert (before[DAY_TABLE][0], after[DAY_TABLE][0]) == (6, 2)  # 1/day
    for table, (files, on_disk, rows) in after.items():
        assert rows == before[table][2], table  # same data
        assert on_disk == files, table  # VACUUM (retention 0) removed the replaced files
        compaction = reports[table].compaction
        assert compaction["numFilesRemoved"] == before[table][0]
        assert len(reports[table].vacuumed) == (
            before[table][1] + compaction["numFilesAdded"] - on_disk
        )
    # Tables the warehouse does not have are skipped, not errors.
    assert reports["dead_letter_table"].skipped and not reports["dead_letter_table"].error
    assert not any(r.error for r in reports.values())
    # A second run has nothing left to do.
    again = {r.table: r for r in housekeep(warehouse, 0, disable_retention_check=True)}
    assert again[TOPIC_QUEUE].compaction["numFilesRemoved"] == 0
    assert not again[TOPIC_QUEUE].vacuumed


def test_default_retention_keeps_replaced_files(warehouse):
    before = _state(warehouse)
    housekeep(warehouse)  # 168 h: compacted, but the old files are still needed by old versions
    after = _state(warehouse)
    assert after[TOPIC_QUEUE][0] == 1 and after[TOPIC_QUEUE][1] == before[TOPIC_QUEUE][1] + 1
    assert all(after[t][2] == before[t][2] for t in before)
    old = DeltaTable(str(warehouse / TOPIC_QUEUE), version=1).to_pyarrow_table()
    assert old.num_rows == 4  # time travel to a pre-OPTIMIZE version still works


def test_full_vacuum_removes_old_orphans_and_change_data(warehouse):
    table = warehouse / TOPIC_QUEUE
    old, fresh = time.time() - 30 * 24 * 3600, time.time()
    strays = {
        table / "_change_data" / "cdc-old.snappy.parquet": old,
        table / "part-orphan-old.snappy.parquet": old,
        table / "part-orphan-new.snappy.parquet": fresh,
    }
    for path, mtime in strays.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"not referenced by the log")
        os.utime(path, (mtime, mtime))
    housekeep(warehouse, lite=True, tables=(TOPIC_QUEUE,))  # tombstones only: strays stay
    assert all(path.exists() for path in strays)
    report = housekeep(warehouse, tables=(TOPIC_QUEUE,))[0]  # like Spark's VACUUM, 168 h
    assert {p: p.exists() for p in strays} == {p: m == fresh for p, m in strays.items()}
    assert sorted(Path(f).name for f in report.vacuumed) == [
        "cdc-old.snappy.parquet",
        "part-orphan-old.snappy.parquet",
    ]
    assert len(DeltaTable(str(table)).file_uris()) == 1


def test_dry_run_changes_nothing(warehouse):
    housekeep(warehouse, 168)  # leaves replaced files for a later VACUUM
    versions = {t: DeltaTable(str(warehouse / t)).version() for t in (TOPIC_QUEUE, PROGRESS)}
    before = _state(warehouse)
    reports = {
        r.table: r for r in housekeep(warehouse, 0, dry_run=True, disable_retention_check=True)
    }
    assert _state(warehouse) == before
    assert {t: DeltaTable(str(warehouse / t)).version() for t in versions} == versions
    assert len(reports[TOPIC_QUEUE].vacuumed) == 5  # what a real run would delete


def test_partition_filter_scopes_history_compaction(warehouse):
    reports = {r.table: r for r in housekeep(warehouse, 168, before=DAYS[1])}
    history = DeltaTable(str(warehouse / DAY_TABLE))
    per_day = {day: sum(f"event_date={day}" in uri for uri in history.file_uris()) for day in DAYS}
    assert per_day == {DAYS[0]: 1, DAYS[1]: 3}  # only the earlier day was compacted
    assert reports[TOPIC_QUEUE].files_after == 1  # unpartitioned tables: always whole
    assert partition_filters(DAY_TABLE, DAYS[0], DAYS[1]) == [
        ("event_date", ">=", DAYS[0]),
        ("event_date", "<", DAYS[1]),
    ]
    assert partition_filters(TOPIC_QUEUE, DAYS[0], None) is None


def test_short_retention_needs_the_explicit_flag(warehouse, capsys):
    with pytest.raises(ValueError, match="retention"):
        housekeep(warehouse, vacuum_hours=DEFAULT_VACUUM_HOURS - 1)
    assert routectl(["housekeeping", "--warehouse", str(warehouse), "--vacuum-hours", "24"]) == 2
    assert "--disable-retention-check" in capsys.readouterr().err
    assert _parquet_on_disk(warehouse / TOPIC_QUEUE) == 5  # nothing touched
    assert (
        routectl(
            [
                "housekeeping",
                "--warehouse",
                str(warehouse),
                "--vacuum-hours",
                "0",
                "--disable-retention-check",
                "--table",
                TOPIC_QUEUE,
            ]
        )
        == 0
    )
    assert f"{TOPIC_QUEUE}: 5 -> 1 files" in capsys.readouterr().out
    assert _parquet_on_disk(warehouse / TOPIC_QUEUE) == 1
    assert _parquet_on_disk(warehouse / PROGRESS) == 4  # --table: the others untouched


def test_routectl_housekeeping_process(warehouse):
    result = subprocess.run(
        [sys.executable, "-m", "routing_lib.cli", "housekeeping", "--warehouse", str(warehouse)]
        + ["--dry-run"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{TOPIC_QUEUE}: 5 files; vacuum would delete 0" in result.stdout


def test_unknown_table_is_refused(warehouse, capsys):
    with pytest.raises(SystemExit) as exit_info:
        routectl(["housekeeping", "--warehouse", str(warehouse), "--table", "no_such_table"])
    assert exit_info.value.code == 2
    assert "'no_such_table' is not one of" in capsys.readouterr().err
    assert _parquet_on_disk(warehouse / TOPIC_QUEUE) == 5  # nothing touched
