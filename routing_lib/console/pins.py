"""Which version of each history and side table belongs to one published batch.

The lookup serves a settled snapshot of the route tables (lookup/consistency.py): every table
up to the batch its route_progress version shows, none of a later batch. The console reads
the history, audit and health tables next to it, so it pins each of them the way the lookup
pins its route tables (consistency.settled_versions): to the newest version showing no batch
that progress commit does not cover, so a table the writer has already moved on by a batch is
read one version (or a few) back. A page then shows one batch everywhere, never half of the
next one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from routing_lib import storage
from routing_lib.console import timing
from routing_lib.core.catalog import TOPIC_BASE_CHANGES, TOPIC_OVERLAY_CHANGES, spec
from routing_lib.core.history import HISTORY_TABLES
from routing_lib.core.tables import DEAD_LETTER, LATE_EVENT, PROGRESS

# The lookup pins its route tables by this rule; the console applies it to the other tables.
from routing_lib.lookup.consistency import _settled_version, commit_mark
from routing_lib.read.open_tables import OpenTables

# The stored history tables: topic_route_history is derived from the two change tables
# (read/route_history.py), so those are pinned and read instead.
PINNED_TABLES = (
    *(table for table in HISTORY_TABLES if spec(table).stored),
    TOPIC_BASE_CHANGES,
    TOPIC_OVERLAY_CHANGES,
    DEAD_LETTER,
    LATE_EVENT,
)
# The columns the console needs of its largest table (3 M rows at 300 groups x 10 000 topics,
# one per base row's change): all but the date partition key.
READ_COLUMNS = {
    TOPIC_BASE_CHANGES: tuple(c for c in spec(TOPIC_BASE_CHANGES).column_names if c != "event_date")
}


def latest_version(warehouse: str | Path, table: str) -> int | None:
    """The table's current version, None when the warehouse has no such table."""
    opened = _open_or_none(warehouse, table)
    return None if opened is None else opened.version()


def _open_or_none(warehouse: str | Path, table: str) -> DeltaTable | None:
    if not storage.is_dir(storage.join(str(warehouse), table, "_delta_log")):
        return None
    try:
        return storage.open_delta(storage.join(str(warehouse), table))
    except TableNotFoundError:
        return None


def pin_versions(
    warehouse: str | Path,
    progress_version: int,
    latest: Callable[[str], int | None] | None = None,
) -> dict[str, int | None]:
    """table -> the version to read with route_progress at `progress_version` (None: the
    warehouse has no such table, e.g. one written before it existed: read as empty).
    `latest`: a table's latest version (TableCache.latest_version: found without opening
    it), else each table is opened."""
    progress = commit_mark(warehouse, PROGRESS, progress_version)
    pins: dict[str, int | None] = {}
    for table in PINNED_TABLES:
        version = latest(table) if latest is not None else latest_version(warehouse, table)
        if version is not None and progress is not None:
            version = _settled_version(warehouse, table, version, progress)
        pins[table] = version
    return pins


class TableCache:
    """Arrow tables by (table, version): a version of a Delta table never changes, so a
    cached one stays right; the least recently used are dropped beyond `capacity`."""

    def __init__(self, warehouse: str | Path, capacity: int = 16) -> None:
        self.warehouse = warehouse
        self.capacity = capacity
        self._tables: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0  # delta-rs reads done (the bench reports it)
        # the tables kept open between snapshots (used under the lock): every new snapshot
        # pins seven tables and reads some, where opening each replays its log
        self._open = OpenTables(warehouse)

    def latest_version(self, table: str) -> int | None:
        """The table's current version (None: the warehouse has no such table), from the
        commit files after the version seen last where it can (OpenTables.latest)."""
        with self._lock:
            return self._open.latest(table, lambda: _open_or_none(self.warehouse, table))

    def get(self, table: str, version: int | None) -> pa.Table | None:
        """The table at `version`; None when the warehouse does not have it."""
        if version is None:
            return None
        key = (table, version)
        with self._lock:  # one reader at a time: two pages never read the same table twice
            cached = self._tables.get(key)
            if cached is not None:
                self._tables.move_to_end(key)
                return cached
            with timing.part("delta"):
                delta = self._open.at(table, version)
                wanted = READ_COLUMNS.get(table)
                present = [f.name for f in delta.schema().fields]
                columns = None if wanted is None else [c for c in wanted if c in present]
                data = delta.to_pyarrow_table(columns=columns)
            self.reads += 1
            self._keep(key, data)
            return data

    def prepared(
        self, table: str, version: int | None, prepare: Callable[[pa.Table], pa.Table]
    ) -> pa.Table | None:
        """`prepare(table at version)`, kept like the table: work done once per version
        (the change tables' next-change column, read/route_history.base_intervals)."""
        if version is None:
            return None
        key = (f"{table}+{prepare.__name__}", version)
        with self._lock:
            cached = self._tables.get(key)
            if cached is not None:
                self._tables.move_to_end(key)
                return cached
        data = self.get(table, version)
        assert data is not None
        with timing.part("prepare"):
            done = prepare(data)
        with self._lock:
            self._keep(key, done)
        return done

    def _keep(self, key: tuple[str, int], data: pa.Table) -> None:
        self._tables[key] = data
        while len(self._tables) > self.capacity:
            self._tables.popitem(last=False)
