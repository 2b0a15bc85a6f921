"""The lookup's watermark stepped from route_progress's new commits (progress_watermark.py)
equals a read of the whole table at every version, and reads the table only when the
commits are not plain one-row appends (real delta-rs commits, the job's writer)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from routing_lib.core.catalog import spec
from routing_lib.core.tables import PROGRESS
from routing_lib.lookup import progress_watermark
from routing_lib.lookup.progress_watermark import ProgressWatermarks
from routing_lib.read.warehouse import read_watermark
from tests.support.writer_support import WriterWarehouse


@pytest.fixture
def whole_reads(monkeypatch) -> list[int]:
    """The versions read whole (a spy on the real read)."""
    versions: list[int] = []
    real = progress_watermark._read_whole

    def counted(warehouse, version):
        versions.append(version)
        return real(warehouse, version)

    monkeypatch.setattr(progress_watermark, "_read_whole", counted)
    return versions


def _version(root: Path) -> int:
    return DeltaTable(str(root / PROGRESS)).version()


def test_appends_step_without_reading_the_table(tmp_path, whole_reads):
    wh = WriterWarehouse(tmp_path, [spec(PROGRESS)])
    watermarks = ProgressWatermarks()
    wh.progress(0, 1_000)
    served = _version(tmp_path)
    assert watermarks.watermark(tmp_path, served) == 1_000  # the first load reads it
    assert whole_reads == [served]
    for batch in range(1, 6):
        wh.progress(batch, 1_000 + batch)
        if batch == 3:
            wh.progress(4, 1_004)  # two batches between two builds
            continue
        now = _version(tmp_path)
        got = watermarks.watermark(tmp_path, now, since=served)
        assert got == read_watermark(tmp_path, now), batch
        served = now
    assert whole_reads == [whole_reads[0]]  # every later build stepped


def test_other_commits_read_the_table(tmp_path, whole_reads):
    """A lower batch id (another writer's) keeps the highest; a tie, a compaction (files
    removed) or a file of several rows reads the table; each answer equals the whole read."""
    wh = WriterWarehouse(tmp_path, [spec(PROGRESS)])
    watermarks = ProgressWatermarks()
    wh.progress(5, 5_000)
    served = _version(tmp_path)
    watermarks.watermark(tmp_path, served)
    table = DeltaTable(str(tmp_path / PROGRESS))
    schema = pa.schema(table.schema().to_arrow())

    def append(rows: list[tuple[int, int]]) -> None:
        data = [{"batch_id": b, "watermark": w} for b, w in rows]
        write_deltalake(table, pa.Table.from_pylist(data, schema=schema), mode="append")

    steps = [
        (lambda: append([(2, 2_000)]), False),  # lower: the highest stays, no read
        (lambda: append([(5, 5_500)]), True),  # the same batch id: which row wins is the read's
        (lambda: append([(6, 6_000), (7, 7_000)]), True),  # one file of two rows
        (lambda: table.optimize.compact(), True),  # files removed and added
        (lambda: append([(9, 9_000)]), False),
    ]
    for change, reads in steps:
        before = len(whole_reads)
        change()
        table.update_incremental()
        now = table.version()
        assert watermarks.watermark(tmp_path, now, since=served) == read_watermark(tmp_path, now)
        assert (len(whole_reads) > before) == reads, change
        served = now
