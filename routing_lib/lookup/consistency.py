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

import json
from dataclasses import dataclass, field
from pathlib import Path

from routing_lib import storage
from routing_lib.core.tables import PROGRESS, ROUTE_TABLES
from routing_lib.read.warehouse import RouteSnapshot, load_snapshot, table_versions


class SnapshotNotSettledError(Exception):
    """The warehouse is between two commits of one batch; try again at the next poll."""


@dataclass(frozen=True)
class CommitMark:
    timestamp: int  # commitInfo.timestamp, ms
    txns: dict[str, int] = field(default_factory=dict)  # appId -> txn version (batch id)


def commit_mark(warehouse: str | Path, table: str, version: int) -> CommitMark | None:
    """What the commit file of one table version says (None if it is gone or unreadable)."""
    path = storage.join(str(warehouse), table, "_delta_log", f"{version:020d}.json")
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
        for app, batch in mark.txns.items():
            covered = (
                batch <= progress.txns[app]
                if app in progress.txns
                else mark.timestamp <= progress.timestamp
            )
            if not covered:
                ahead.append(table)
                break
    return ahead


def load_settled(warehouse: str | Path) -> RouteSnapshot:
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
