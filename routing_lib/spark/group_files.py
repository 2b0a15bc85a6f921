"""Tables partitioned by broker_name whose files the writer places itself (issue 36):
topic_queue_table always, topic_base for new groups (their first rows: a group's file
written at once, where delta-rs's append kept every partition's rows until its commit) and
when a batch touches a group whose name no Hive folder can hold (otherwise its MERGE, whose
change data is O(changed rows)).

A group's rows are its partition: the add actions carry `partitionValues = {broker_name:
name}`, which is what Delta readers (delta-rs, Spark) take the column from. The files,
though, are not at delta-rs's Hive path `broker_name=<name>/`: a brokerName may be 255
characters of anything (schemas/route_event.py), and percent-encoded that is no directory name
a filesystem takes ("File name too long"). So each group's file is written here with pyarrow
at `g=<sha1 of the name>/part-<uuid>.parquet` and committed with
`DeltaTable.create_write_transaction`: the removes of the groups' current files and the adds
of their new ones in one commit (txn included), so replacing a group's rows copies no row of
another group, and a group whose rows are gone is a remove with nothing added.

Each partition stays one file (every replacement writes one), so OPTIMIZE has nothing to do
there and never writes a Hive path.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Collection
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from routing_lib import storage

PARTITION = "broker_name"


def sql_string(value: str) -> str:
    """A SQL string literal (a quote in a group's name doubled)."""
    return "'" + value.replace("'", "''") + "'"


def groups_predicate(groups: Collection[str]) -> str:
    """The predicate selecting the groups' partitions."""
    return "broker_name IN ({})".format(", ".join(sql_string(g) for g in sorted(groups)))


_HIVE_SAFE = re.compile(r"[A-Za-z0-9._-]{1,200}")


def hive_safe(group: str) -> bool:
    """delta-rs's own writers (MERGE) can place the group's files at broker_name=<name>/:
    plain characters, no percent-encoding, well under a file name's 255 bytes."""
    return _HIVE_SAFE.fullmatch(group) is not None


def group_folder(group: str) -> str:
    """A group's folder in the table: bounded and plain whatever its name."""
    return "g=" + hashlib.sha1(group.encode()).hexdigest()[:24]


def read_groups(table: DeltaTable, groups: Collection[str]) -> pa.Table:
    """The groups' rows (the broker_name column from the partition values), reading only
    their files."""
    if not groups:
        return pa.schema(table.schema().to_arrow()).empty_table()
    dataset = table.to_pyarrow_dataset(file_pruning_predicate=groups_predicate(groups))
    return dataset.to_table()


def _stats(rows: pa.Table) -> str:
    """The add action's stats: numRecords, and per column min, max and null count (what
    delta-rs and Spark skip files by)."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in rows.column_names:
        column = rows.column(name)
        nulls[name] = column.null_count
        kind = column.type
        if pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_boolean(kind):
            bounds = pc.min_max(column)
            if bounds["min"].is_valid:
                low[name], high[name] = bounds["min"].as_py(), bounds["max"].as_py()
    return json.dumps(
        {"numRecords": rows.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}
    )


def replace_groups(
    table: DeltaTable,
    location: str,
    groups: Collection[str],
    rows: pa.Table,
    commit: CommitProperties,
) -> None:
    """One commit: every file of `groups` removed, one file per group of `rows` (which holds
    rows of those groups only, broker_name included) added."""
    schema = pa.schema(table.schema().to_arrow())
    wanted = set(groups)
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    current = pa.table(table.get_add_actions(flatten=True))
    names = current.column(f"partition.{PARTITION}").to_pylist()
    paths = current.column("path").to_pylist()
    sizes = current.column("size_bytes").to_pylist()
    for path, size, name in zip(paths, sizes, names, strict=True):
        if name in wanted:
            actions.append(RemoveAction(path, True, now, size, {PARTITION: name}))
    data = rows.select(schema.names).cast(schema)
    filesystem, root = storage.filesystem(location)
    if data.num_rows:
        data = data.sort_by(PARTITION).combine_chunks()
        # the groups' runs in the sorted rows: one slice (one file) per group, no row loop
        runs = pc.run_end_encode(data.column(PARTITION).chunk(0))
        start = 0
        columns = [n for n in schema.names if n != PARTITION]
        for end, name in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
            group_rows = data.slice(start, end - start).select(columns)
            start = end
            relative = f"{group_folder(name)}/part-{uuid.uuid4()}.snappy.parquet"
            path = f"{root.rstrip('/')}/{relative}"
            filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
            pq.write_table(group_rows, path, filesystem=filesystem, compression="snappy")
            size = filesystem.get_file_info(path).size
            stats = _stats(group_rows)
            actions.append(AddAction(relative, size, {PARTITION: name}, now, True, stats))
    if not actions:
        return
    table.create_write_transaction(
        actions, mode="append", schema=schema, partition_by=[PARTITION], commit_properties=commit
    )
