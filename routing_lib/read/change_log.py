"""A Delta table's change feed read from its commit files and Parquet files directly.

The lookup reads topic_base's and topic_overlay's change feed after every batch. delta-rs'
`load_cdf` plans that read with DataFusion: the first call maps ~27 MB of deltalake's library
code (`_internal.abi3.so`) that nothing else the lookup does touches, in every process of the
service, and a served snapshot never needs it again; at 3 M routes that was a third of what
the lookup's RSS grew after the load. The feed of the commits the job writes is simple to read
without it: per the Delta protocol, a commit with `cdc` actions has its changes in those files
(each row with its `_change_type`); a commit without them changes whole files: an `add` with
dataChange inserts its rows, a `remove` with dataChange deletes them. Partition values are in
the actions, not in the files. pyarrow's Parquet reader is the one the lookup's loads use.

`read_log_changes` answers only when that is certainly delta-rs' answer (the equality is a
test: tests/test_change_log.py), else None and the caller asks delta-rs, which answers or
raises its own errors (feed off, commits cleaned up, files vacuumed):
a table on object storage, a reader protocol above 1 (deletion vectors, column mapping), a
commit in the range that changes the metadata or the protocol (the feed may be switched on
or off there), a missing or unreadable commit or data file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from routing_lib import storage
from routing_lib.read.open_tables import commit_file

log = logging.getLogger("routelake.read")

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
_FEED = "delta.enableChangeDataFeed"


class _CannotAnswer(Exception):
    """Something this reader leaves to delta-rs."""


def _plain(data_type: pa.DataType) -> pa.DataType:
    """Arrow's view types as the plain ones pyarrow's Parquet reader gives."""
    if data_type == pa.string_view():
        return pa.string()
    if data_type == pa.binary_view():
        return pa.binary()
    return data_type


def _output_schema(table: DeltaTable) -> tuple[pa.Schema, list[str]]:
    """The feed's columns in delta-rs' order (data columns, partition columns, then the change
    type, commit version and timestamp) and the partition columns."""
    schema = pa.schema(table.schema().to_arrow())
    partitions = list(table.metadata().partition_columns)
    fields = [f.with_type(_plain(f.type)) for f in schema if f.name not in partitions]
    fields += [schema.field(p).with_type(_plain(schema.field(p).type)) for p in partitions]
    fields += [
        pa.field(CHANGE_TYPE, pa.string()),
        pa.field(COMMIT_VERSION, pa.uint64()),
        pa.field(COMMIT_TIMESTAMP, pa.timestamp("ms")),
    ]
    return pa.schema(fields), partitions


def _commit_actions(root: Path, version: int) -> list[dict[str, Any]]:
    path = Path(commit_file(root, version))
    try:
        text = path.read_text()
    except OSError as exc:  # cleaned up (or never there): delta-rs says which
        raise _CannotAnswer(f"commit {version}: {exc}") from exc
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _file_rows(
    root: Path,
    action: dict[str, Any],
    change_type: str | None,
    schema: pa.Schema,
    partitions: list[str],
    version: int,
    timestamp: int,
) -> pa.Table:
    """One file's rows with the feed's columns (`change_type` None: the file holds them)."""
    relative = unquote(action["path"])
    if "://" in relative or action.get("deletionVector"):
        raise _CannotAnswer(f"file {relative}: not a plain file of the table")
    try:
        # the file alone (a third of read_table's cost, which plans a dataset per file: a
        # 20-row batch of topic_base is ~20-40 change files, read after every batch)
        with pq.ParquetFile(root / relative) as file:
            data = file.read(use_threads=False)
    except (OSError, pa.ArrowException) as exc:  # vacuumed, or a storage fault: delta-rs says
        raise _CannotAnswer(f"file {relative}: {exc}") from exc
    rows = data.num_rows
    values = action.get("partitionValues") or {}
    columns = []
    for field in schema:
        if field.name in partitions:
            value = values.get(field.name)
            column = pa.array([value] * rows, pa.string()).cast(field.type)
        elif field.name == CHANGE_TYPE and change_type is not None:
            column = pa.array([change_type] * rows, pa.string())
        elif field.name == COMMIT_VERSION:
            column = pa.array([version] * rows, pa.uint64())
        elif field.name == COMMIT_TIMESTAMP:
            column = pa.array([timestamp] * rows, pa.int64()).cast(field.type)
        elif field.name in data.column_names:
            column = data.column(field.name).cast(field.type)
        else:  # a column added after this file was written
            column = pa.nulls(rows, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def _commit_changes(
    root: Path, version: int, schema: pa.Schema, partitions: list[str]
) -> list[pa.Table]:
    actions = _commit_actions(root, version)
    if any("metaData" in a or "protocol" in a for a in actions):
        raise _CannotAnswer(f"commit {version} changes the metadata or the protocol")
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    timestamp = int(info.get("timestamp", 0))

    def read(action: dict[str, Any], change_type: str | None) -> pa.Table:
        return _file_rows(root, action, change_type, schema, partitions, version, timestamp)

    cdc = [a["cdc"] for a in actions if "cdc" in a]
    if cdc:
        return [read(a, None) for a in cdc]
    removed = [a["remove"] for a in actions if "remove" in a and a["remove"].get("dataChange")]
    added = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange")]
    return [read(a, "delete") for a in removed] + [read(a, "insert") for a in added]


def read_log_changes(table: DeltaTable, location: str, first: int, last: int) -> pa.Table | None:
    """The change-feed rows of versions first..last of `table` (opened at `last`, stored at
    `location`), as delta-rs' `load_cdf` gives them; None where this reader leaves it to
    delta-rs."""
    if storage.is_remote(location):
        return None
    try:
        if table.protocol().min_reader_version > 1:
            raise _CannotAnswer("reader protocol above 1")
        if table.metadata().configuration.get(_FEED, "false").lower() != "true":
            raise _CannotAnswer("the feed is off at the range's end")
        schema, partitions = _output_schema(table)
        root = Path(location)
        pieces = [
            piece
            for version in range(first, last + 1)
            for piece in _commit_changes(root, version, schema, partitions)
        ]
    except _CannotAnswer as why:
        log.debug("change feed of %s %d..%d left to delta-rs: %s", location, first, last, why)
        return None
    return pa.concat_tables(pieces) if pieces else schema.empty_table()
