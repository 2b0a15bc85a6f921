"""Base indexes shared by the lookup's processes: Arrow IPC files in /dev/shm, mapped.

`serve --workers N` runs N processes that each serve the same snapshots. The big part of a
snapshot, topic_base's index (`BaseIndex`: 3 M holders at 300 groups x 10 000 topics), is
immutable per topic_base version, so one process writes it once as a file in a directory of
this service and every process maps it: the pages are in memory once (a tmpfs file's pages
are shared by every mapping), each process adds only its small per-version parts (overlays,
the delta since the file, the broker tables).

Files are named by topic_base's table id and version. A process that needs a base (the first
load, or its delta grew large) takes the directory's lock, maps the file of that version if
another process wrote it meanwhile, else builds and writes it (to a temporary name, renamed
into place: a reader never sees half a file). The writer then unlinks the older files but the
newest `keep`: a process still serving an older one keeps its mapping (an unlinked file's
pages live until the last mapping goes), and maps the newer one at its next build
(`newest`), so an old version's memory is freed once no process uses it.

A snapshot's per-holder `present` flags and per-topic `counts` (route_topics.py: 3 MB + 6 MB
at 3 M routes, new with every fault of a group) are shared the same way (`arrays`): they are
a function of the base index file and topic_overlay's version, so the first process to build
a snapshot writes them to a file named by both, and every process (that one too) drops its
own copy for a read-only view of the file. The newest `keep_arrays` such files are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from routing_lib.lookup.base_index import BaseIndex

DIR_ENV = "ROUTELAKE_LOOKUP_INDEX_DIR"  # set by the primary for the processes it forks
SHM = Path("/dev/shm")
_ALIGN = 64  # each array of an arrays file starts at a multiple of this
_NAME = re.compile(r"base-(?P<table>[0-9A-Za-z-]+)-(?P<version>\d{20})\.arrow")


def _shared_memory_dir() -> str | None:
    """/dev/shm when this system has a writable one (a tmpfs: files live in memory)."""
    return str(SHM) if SHM.is_dir() and os.access(SHM, os.W_OK) else None


class SharedIndexes:
    def __init__(self, directory: Path, keep: int = 2, keep_arrays: int = 4) -> None:
        self.directory = directory
        self.keep = keep
        self.keep_arrays = keep_arrays

    @staticmethod
    def create() -> SharedIndexes:
        """A fresh directory (in /dev/shm when there is one); `remove` it at the end."""
        return SharedIndexes(
            Path(tempfile.mkdtemp(prefix="routelake-lookup-index-", dir=_shared_memory_dir()))
        )

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def path(self, table_id: str, version: int) -> Path:
        return self.directory / f"base-{table_id}-{version:020d}.arrow"

    def versions(self, table_id: str) -> list[int]:
        """The versions of `table_id` with a file, oldest first."""
        found = []
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                match = _NAME.fullmatch(name)
                if match and match["table"] == table_id:
                    found.append(int(match["version"]))
        return sorted(found)

    def newest(self, table_id: str, at_most: int, newer_than: int = -1) -> BaseIndex | None:
        """The newest index of `table_id` at a version <= `at_most`, mapped (None: none, or
        none newer than `newer_than`: the one a process maps already is not mapped again)."""
        for version in reversed(self.versions(table_id)):
            if version <= newer_than:
                return None
            if version <= at_most:
                with contextlib.suppress(FileNotFoundError):  # unlinked meanwhile
                    return BaseIndex.mapped(self.path(table_id, version), version, table_id)
        return None

    def publish(self, table_id: str, version: int, write: Callable[[Path], None]) -> BaseIndex:
        """The index of `version`: mapped if a process wrote it, else written by `write` (to
        a temporary name, renamed into place) and mapped."""
        with self._locked():
            path = self.path(table_id, version)
            if not path.exists():
                partial = path.with_suffix(f".{os.getpid()}.partial")
                try:
                    write(partial)
                    os.replace(partial, path)
                finally:
                    partial.unlink(missing_ok=True)
                self._prune(table_id)
            return BaseIndex.mapped(path, version, table_id)

    def _prune(self, table_id: str) -> None:
        """Unlink every other table's files and this table's but the newest `keep`."""
        keep = {self.path(table_id, v).name for v in self.versions(table_id)[-self.keep :]}
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                if _NAME.fullmatch(name) and name not in keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.directory / name)

    # -- a snapshot's per-holder and per-topic arrays --

    def arrays(self, key: str, arrays: Sequence[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
        """`arrays` as read-only views of this service's file for `key`: the file another
        process wrote for the same key, else written from `arrays` first. The caller makes
        the key name everything the arrays are a function of (processes that compute the
        same key compute the same arrays), and drops its own copies for the views."""
        path = self.directory / f"arrays-{key}.bin"
        offsets, end = [], 0
        for array in arrays:
            offsets.append(end)
            end += -(-array.nbytes // _ALIGN) * _ALIGN
        with self._locked():
            if not path.exists():
                partial = path.with_suffix(f".{os.getpid()}.partial")
                try:
                    with open(partial, "wb") as out:
                        for array, at in zip(arrays, offsets, strict=True):
                            out.seek(at)
                            out.write(np.ascontiguousarray(array).tobytes())
                        out.truncate(end)
                    os.replace(partial, path)
                finally:
                    partial.unlink(missing_ok=True)
                self._prune_arrays()
            with open(path, "rb") as source:
                size = os.fstat(source.fileno()).st_size
                if size != end:  # not the same arrays after all: keep this process's own
                    return list(arrays)
                mapped = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) if end else b""
        return [
            np.frombuffer(mapped, a.dtype, a.size, at).reshape(a.shape)
            for a, at in zip(arrays, offsets, strict=True)
        ]

    def _prune_arrays(self) -> None:
        """Unlink all but the newest `keep_arrays` arrays files (by modification time): a
        process serving an older snapshot keeps its mapping."""
        found = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if entry.name.startswith("arrays-") and entry.name.endswith(".bin"):
                    found.append((entry.stat().st_mtime_ns, entry.name))
        for _, name in sorted(found)[: -self.keep_arrays]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / name)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / "build.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
