"""Load the route tables of a warehouse with delta-rs (no JVM, no Spark): a local folder or
s3:// / s3a:// (routing_lib/storage.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from routing_lib import storage
from routing_lib.core.catalog import CATALOG, PROGRESS, Reader, read_by
from routing_lib.core.dump import canonical_dump
from routing_lib.core.tables import ROUTE_TABLES, Row
from routing_lib.layout import require_group_layout
from routing_lib.read.change_log import read_log_changes
from routing_lib.read.open_tables import OpenTables

# Tables a warehouse written by an older version of the job lacks (it had no KV config): read
# as empty, and left out of the versions until they appear (which then counts as a change).
OPTIONAL_TABLES = frozenset(spec.name for spec in CATALOG if spec.optional)
# What a snapshot reads: the route tables and route_progress.
SNAPSHOT_TABLES = read_by(Reader.DUMP)


class WarehouseError(Exception):
    """The warehouse is missing, or is not a routelake warehouse of Delta tables."""


@dataclass(frozen=True)
class WarehouseSnapshot:
    """The published route tables as read from the warehouse at one version each (one
    group's tables inside the state machine are a core.tables.RoutesSnapshot)."""

    tables: dict[str, list[Row]]
    versions: dict[str, int]  # Delta table version of each table read
    watermark: int | None  # of the last published batch; None before the first one

    def dump(self) -> dict[str, Any]:
        return canonical_dump(self.tables, self.watermark)


def open_table(warehouse: str | Path, table: str) -> DeltaTable:
    root = str(warehouse)
    if not storage.is_dir(root):
        raise WarehouseError(f"warehouse {root} does not exist")
    path = storage.join(root, table)
    try:
        return storage.open_delta(path)
    except TableNotFoundError:
        require_group_layout(root)  # a per-topic warehouse: name `routectl migrate`
        raise WarehouseError(
            f"{path} is not a Delta table: is {root} a routelake warehouse "
            "(run `routectl backfill` or `routectl run` first)?"
        ) from None


def open_optional(warehouse: str | Path, table: str) -> DeltaTable | None:
    """`open_table`, but None when the warehouse predates `table` (an older warehouse)."""
    if not storage.is_dir(storage.join(str(warehouse), table, "_delta_log")):
        open_table(warehouse, PROGRESS)  # still a warehouse at all? (else WarehouseError)
        return None
    return open_table(warehouse, table)


def open_latest(warehouse: str | Path, table: str) -> DeltaTable | None:
    """A snapshot table at its latest version (None: an optional one the warehouse lacks)."""
    return (
        open_optional(warehouse, table)
        if table in OPTIONAL_TABLES
        else open_table(warehouse, table)
    )


def table_versions(warehouse: str | Path) -> dict[str, int]:
    versions = {}
    for table in SNAPSHOT_TABLES:
        delta = open_latest(warehouse, table)
        if delta is not None:
            versions[table] = delta.version()
    return versions


def load_snapshot(warehouse: str | Path) -> WarehouseSnapshot:
    tables: dict[str, list[Row]] = {}
    versions: dict[str, int] = {}
    for table in ROUTE_TABLES:
        delta = open_latest(warehouse, table)
        if delta is None:
            tables[table] = []
            continue
        versions[table] = delta.version()
        tables[table] = delta.to_pyarrow_table().to_pylist()
    progress = open_table(warehouse, PROGRESS)
    versions[PROGRESS] = progress.version()
    rows = progress.to_pyarrow_table(columns=["batch_id", "watermark"]).to_pylist()
    watermark = max(rows, key=lambda r: r["batch_id"])["watermark"] if rows else None
    return WarehouseSnapshot(tables, versions, watermark)


# -- reads pinned to one version (the lookup's snapshots) --


class ChangesUnavailableError(Exception):
    """The change feed cannot say what changed between two versions (not enabled for one of
    them, its files or commits cleaned up): read the table whole instead."""


def open_version(warehouse: str | Path, table: str, version: int) -> DeltaTable:
    path = storage.join(str(warehouse), table)
    return DeltaTable(
        storage.delta_uri(path),
        version=version,
        storage_options=storage.delta_storage_options(path),
    )


def _at(warehouse: str | Path, table: str, version: int, tables: OpenTables | None) -> DeltaTable:
    return tables.at(table, version) if tables else open_version(warehouse, table, version)


def read_version(
    warehouse: str | Path,
    table: str,
    version: int,
    columns: list[str] | None = None,
    tables: OpenTables | None = None,
) -> pa.Table:
    """`table` at `version` (`tables`: a reader's open tables, moved to it)."""
    return _at(warehouse, table, version, tables).to_pyarrow_table(columns=columns)


def read_changes(
    warehouse: str | Path, table: str, first: int, last: int, tables: OpenTables | None = None
) -> pa.Table:
    """The change-feed rows of versions first..last (`_change_type`: insert, delete,
    update_preimage, update_postimage; `_commit_version`). Commits without the feed (a
    delta-rs append or overwrite) come from their add/remove actions: whole files in or out.
    `tables`: a reader's open tables, the table's moved to `last`."""
    if not 0 <= first <= last:  # delta-rs would say "Invalid table version", as for a cleanup
        raise ValueError(f"no version range {first}..{last}")
    try:
        delta = _at(warehouse, table, last, tables)
        # the commits' own files where they certainly give delta-rs' answer (change_log.py:
        # load_cdf's query engine maps ~27 MB of library code in each process)
        local = read_log_changes(delta, storage.join(str(warehouse), table), first, last)
        if local is not None:
            return local
        reader = delta.load_cdf(starting_version=first, ending_version=last)
        return pa.table(reader.read_all())
    except Exception as exc:
        if not no_change_feed(exc):  # a bug or a storage fault: the caller must see it
            raise
        raise ChangesUnavailableError(f"{table} {first}..{last}: {exc}") from exc


# What delta-rs (1.6) says when the change feed cannot cover a range. It raises DeltaError, or
# a bare Exception from the Arrow stream, for these and for real faults alike, so only the
# message tells them apart (tests/test_read_changes.py pins each one on real tables).
_NO_CHANGE_FEED = re.compile(
    "|".join(
        [
            "does not have change data enabled",  # the range starts where the feed was off
            "Change Data not enabled for version",  # the feed was off inside the range
            r"Invalid table version: \d+",  # the range's commits were cleaned up
            r"Object at location \S+ not found",  # its change-data or data files were vacuumed
        ]
    )
)


def no_change_feed(exc: Exception) -> bool:
    """Does this error of `load_cdf` mean that the change feed cannot cover the range?"""
    return type(exc) in (DeltaError, Exception) and bool(_NO_CHANGE_FEED.search(str(exc)))


def read_watermark(warehouse: str | Path, version: int) -> int | None:
    """The watermark of the last batch route_progress shows at `version`."""
    rows = read_version(warehouse, PROGRESS, version, ["batch_id", "watermark"]).to_pylist()
    return max(rows, key=lambda r: r["batch_id"])["watermark"] if rows else None
