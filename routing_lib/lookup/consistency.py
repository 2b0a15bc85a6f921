"""Load a snapshot that shows one published micro-batch, never half of one.

The writer commits a micro-batch table by table (route tables first, then the progress row),
each commit carrying a Delta `txn` action (appId, version = batch id). `load_snapshot` reads
the tables one after the other, so on its own it can catch a writer between two commits.
A snapshot is accepted only when
1. no table moved while it was read (versions read again afterwards are the same), and
2. no route table shows a batch commit the progress table does not cover yet: same appId
   and a higher batch id, or (another appId, e.g. a backfill before a streaming run) a commit
   newer than the progress commit. Commits without `txn` (maintenance) are ignored.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from deltalake import DeltaTable

from routing_lib import storage
from routing_lib.core.catalog import TOPIC_BASE, TOPIC_OVERLAY
from routing_lib.core.tables import PROGRESS, ROUTE_TABLES
from routing_lib.read.open_tables import OpenTables, commit_file
from routing_lib.read.warehouse import (
    SNAPSHOT_TABLES,
    WarehouseSnapshot,
    load_snapshot,
    open_latest,
    open_optional,
    open_table,
    table_versions,
)

# topicQueueTable is served from these (issue 36): pinned with the other route tables
GROUP_TABLES = (TOPIC_BASE, TOPIC_OVERLAY)
PINNED_TABLES = (*ROUTE_TABLES, *GROUP_TABLES)


class SnapshotNotSettledError(Exception):
    """The warehouse is between two commits of one batch; try again at the next poll."""


@dataclass(frozen=True)
class CommitMark:
    timestamp: int  # commitInfo.timestamp, ms
    txns: dict[str, int] = field(default_factory=dict)  # appId -> txn version (batch id)


def commit_mark(warehouse: str | Path, table: str, version: int) -> CommitMark | None:
    """What the commit file of one table version says (None if it is gone or unreadable)."""
    path = commit_file(storage.join(str(warehouse), table), version)
    try:
        lines = storage.read_text(path).splitlines()
    except OSError:
        return None  # cleaned up by log retention: nothing to compare, trust the versions
    timestamp, txns = 0, {}
    for line in lines:
        try:
            action = json.loads(line)
        except ValueError:
            continue
        if "commitInfo" in action:
            timestamp = int(action["commitInfo"].get("timestamp") or 0)
        elif "txn" in action:
            txns[action["txn"]["appId"]] = int(action["txn"]["version"])
    return CommitMark(timestamp, txns)


def uncovered_tables(warehouse: str | Path, versions: dict[str, int]) -> list[str]:
    """Route tables whose commit at `versions` belongs to a batch not yet in route_progress."""
    progress = commit_mark(warehouse, PROGRESS, versions[PROGRESS])
    if progress is None:
        return []
    ahead = []
    for table in ROUTE_TABLES:
        if table not in versions:
            continue  # an optional table the warehouse does not have (read as empty)
        mark = commit_mark(warehouse, table, versions[table])
        if mark is None or not mark.txns:
            continue
        if not _covered(mark, progress):
            ahead.append(table)
    return ahead


def _covered(mark: CommitMark, progress: CommitMark) -> bool:
    """Every batch commit of `mark` is one the progress commit has published already."""
    return all(
        batch <= progress.txns[app]
        if app in progress.txns
        else mark.timestamp <= progress.timestamp
        for app, batch in mark.txns.items()
    )


# How far back a table may be ahead of route_progress: one batch in flight is normal.
MAX_WALK_BACK = 1000


def settled_versions(
    warehouse: str | Path, tables: OpenTables | None = None
) -> tuple[dict[str, int], dict[str, int]]:
    """(pinned, latest): table versions that show exactly the batches route_progress has
    published, and the tables' latest versions. Unlike `load_settled` this never waits for
    the writer: route_progress's version is read first, and a route table that already shows
    a later batch is pinned to its version before that batch (a commit without `txn`, e.g.
    OPTIMIZE, changes no data and is stepped over). Reads pinned this way cannot mix two
    batches however long they take, so a large warehouse settles while the job publishes.
    `tables`: a reader's open tables, whose latest versions it follows from the versions
    found before (none: every table is opened)."""
    tables = tables or OpenTables(warehouse)
    progress_version = tables.latest(PROGRESS, lambda: open_table(warehouse, PROGRESS))
    assert progress_version is not None  # open_table raises rather than answer None
    latest = lookup_versions(warehouse, tables)  # route tables after progress: never behind
    pinned = {**latest, PROGRESS: progress_version}
    progress = commit_mark(warehouse, PROGRESS, progress_version)
    if progress is None:
        return pinned, latest  # its commit is cleaned up: nothing to compare, trust them
    for table in PINNED_TABLES:
        if table in latest:
            pinned[table] = _settled_version(warehouse, table, latest[table], progress)
    return pinned, latest


def lookup_versions(warehouse: str | Path, tables: OpenTables | None = None) -> dict[str, int]:
    """The latest versions of what the lookup reads: the route tables, route_progress and
    the group layout's topic_base and topic_overlay (left out when missing: the lookup
    then names the migration). `tables`: as for settled_versions."""
    tables = tables or OpenTables(warehouse)
    versions = {}
    for table in (*SNAPSHOT_TABLES, *GROUP_TABLES):
        version = tables.latest(table, functools.partial(_open_latest, warehouse, table))
        if version is not None:
            versions[table] = version
    return versions


def _open_latest(warehouse: str | Path, table: str) -> DeltaTable | None:
    """A table the lookup reads, at its latest version (None: the warehouse lacks it)."""
    if table in GROUP_TABLES:
        return open_optional(warehouse, table)  # the lookup names the migration
    return open_latest(warehouse, table)


def _settled_version(warehouse: str | Path, table: str, version: int, progress: CommitMark) -> int:
    candidate = version
    for step in range(MAX_WALK_BACK):
        at = version - step
        if at <= 0:
            return candidate  # the table's creation: nothing earlier
        mark = commit_mark(warehouse, table, at)
        if mark is None:
            return candidate  # cleaned up by log retention: trust what is left
        if mark.txns:
            if _covered(mark, progress):
                return candidate
            candidate = at - 1  # a batch route_progress does not show yet
    raise SnapshotNotSettledError(f"{table} is more than {MAX_WALK_BACK} commits ahead")


def load_settled(warehouse: str | Path) -> WarehouseSnapshot:
    snapshot = load_snapshot(warehouse)
    after = table_versions(warehouse)
    if after != snapshot.versions:
        raise SnapshotNotSettledError(
            f"tables moved while loading ({snapshot.versions} -> {after})"
        )
    ahead = uncovered_tables(warehouse, snapshot.versions)
    if ahead:
        raise SnapshotNotSettledError(
            f"{', '.join(ahead)} already show a batch that route_progress does not yet"
        )
    return snapshot
