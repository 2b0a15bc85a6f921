"""Filtered delta-rs reads on string, integer and partition columns (routing_lib/read/
arrow_filters.py): pyarrow 25 reads Parquet strings as string_view, which delta-rs's own
`filters` cannot compare."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from routing_lib.read.arrow_filters import read_table


def _table(tmp_path) -> DeltaTable:
    rows = pa.table(
        {
            "topic": ["T1", "T2", "T1", "T3"],
            "broker_name": ["a", "a", "b", "c"],
            "event_time": [10, 20, 30, 40],
            "event_date": ["2025-11-24", "2025-11-24", "2025-11-25", "2025-11-25"],
        }
    )
    write_deltalake(str(tmp_path / "t"), rows, partition_by=["event_date"])
    return DeltaTable(str(tmp_path / "t"))


def test_string_integer_and_partition_filters(tmp_path):
    delta = _table(tmp_path)
    got = read_table(delta, [("topic", "=", "T1")], ["broker_name"]).to_pylist()
    assert sorted(r["broker_name"] for r in got) == ["a", "b"]
    later = read_table(delta, [("event_date", ">=", "2025-11-25"), ("event_time", ">", 30)])
    assert later.column("topic").to_pylist() == ["T3"]
    assert read_table(delta, [("broker_name", "in", ["a", "c"])]).num_rows == 3
    assert read_table(delta, [("topic", "!=", "T1")]).num_rows == 2
    assert read_table(delta).num_rows == 4
