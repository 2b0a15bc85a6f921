"""The Delta tables one reader reads at ever newer versions (the lookup's refresher), kept open.

Opening a DeltaTable replays its log from the last checkpoint. The lookup reads a snapshot
per published batch: it found each table's latest version (ten opens) and then opened the
tables it read at their pinned versions again (two to five more). At 3 M routes those opens
were ~60 % of a batch's build, and they grow with the commits since the last checkpoint and
with topic_base's files. Kept open, a table moves to a newer version by reading only the
commits in between (`load_as_version`). On a local warehouse a table's latest version is
found without delta-rs at all: a Delta version exists once its commit file does (a commit is
written whole under a temporary name and linked into place), so from a version known here
the next ones are the stats of the next commit files.

Not thread-safe: one reader's, used by one thread at a time. `at` hands out the open table
itself: use it before the next call (that may move it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from deltalake import DeltaTable

from routing_lib import storage


def commit_file(table_path: str | Path, version: int) -> str:
    return storage.join(str(table_path), "_delta_log", f"{version:020d}.json")


FileId = tuple[int, int, int]


def _file_id(path: str) -> FileId:
    """Which file this is: a table written again has other commit files under the same
    names (a freed inode number may come back, not with the same change time too)."""
    stat = os.stat(path)
    return stat.st_ino, stat.st_ctime_ns, stat.st_size


class OpenTables:
    def __init__(self, warehouse: str | Path) -> None:
        self.warehouse = warehouse
        self.local = not storage.is_remote(warehouse)
        self._open: dict[str, DeltaTable] = {}
        # table -> (a version seen here, its commit file's identity): where the stats start
        self._seen: dict[str, tuple[int, FileId]] = {}

    def path(self, table: str) -> str:
        return storage.join(str(self.warehouse), table)

    def at(self, table: str, version: int) -> DeltaTable:
        """`table` at `version`: the open one moved forward to it (a fresh open when none is
        open here or the open one is past `version`)."""
        held = self._open.get(table)
        if held is not None and held.version() <= version:
            if held.version() < version:
                try:
                    held.load_as_version(version)
                except BaseException:  # what it holds now is not known: open afresh next
                    del self._open[table]
                    raise
            return held
        path = self.path(table)
        opened = DeltaTable(
            storage.delta_uri(path),
            version=version,
            storage_options=storage.delta_storage_options(path),
        )
        self._open[table] = opened
        return opened

    def latest(self, table: str, open_latest: Callable[[], DeltaTable | None]) -> int | None:
        """`table`'s latest version: on a local warehouse from the commit files after the one
        seen here last, else (the first time, on object storage, or when that commit file is
        not the one seen: the table replaced or its log cleaned up) `open_latest()`'s (None:
        no such table)."""
        seen = self._seen.get(table)
        if seen is not None:
            found = self._next_commits(table, *seen)
            if found is not None:
                return found
            self._open.pop(table, None)  # replaced, perhaps: nothing of it is kept
        opened = open_latest()
        if opened is None:
            self._seen.pop(table, None)
            return None
        version = opened.version()
        if self.local:
            try:
                self._seen[table] = (version, _file_id(commit_file(self.path(table), version)))
            except OSError:  # a checkpoint without its commit file: ask delta-rs each time
                self._seen.pop(table, None)
        return version

    def forget(self) -> None:
        """Open every table afresh from now on (after a failed read: what failed is not
        known)."""
        self._open.clear()
        self._seen.clear()

    def _next_commits(self, table: str, version: int, seen: FileId) -> int | None:
        """The last of the commit files after `version`'s, if that one is still the file seen
        (None: it is not)."""
        path = self.path(table)
        try:
            if _file_id(commit_file(path, version)) != seen:
                return None
        except OSError:
            return None
        while True:
            try:
                seen = _file_id(commit_file(path, version + 1))
            except FileNotFoundError:
                break
            version += 1
        self._seen[table] = (version, seen)
        return version
